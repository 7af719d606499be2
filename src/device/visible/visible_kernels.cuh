#pragma once
// Device side of `xstage visible`: producers that publish every burst with a
// per-(burst, CTA) release marker, a GPU poller that timestamps the markers'
// arrival in its own memory, a ping-pong responder that lends its
// %globaltimer to a CPU clock calibration, and the timer-resolution reading.
// Every wait is bounded. The poller and the ping-pong responder record who
// waited for what in a status block and return, so the host can say so; the
// producers' start barrier is the probe's wait, which prints rank, flag and
// values and traps (the host then sees a launch error, the poller its own
// timeout).
#include <cstdint>

#include "device/comm/grid_start.cuh"
#include "device/ptx/fence.cuh"
#include "device/ptx/flags.cuh"
#include "device/ptx/store.cuh"
#include "device/ptx/timer.cuh"
#include "device/visible/visible_params.hpp"

namespace xstage::visible {

// One producer's share of burst b, 16-byte stores spread over the CTA (the probe's v4 store style).
__device__ __forceinline__ void store_chunk(uint8_t* chunk, uint32_t chunk_bytes, uint32_t b) {
  for (uint32_t i = threadIdx.x; i < chunk_bytes / 16; i += blockDim.x) {
    const uint32_t w = 4 * i;
    ptx::st_global_v4_b32(chunk + 16ull * i,
                          make_uint4(data_word(b, w), data_word(b, w + 1), data_word(b, w + 2), data_word(b, w + 3)));
  }
}

__device__ __forceinline__ uint64_t* marker_at(uint64_t* markers, uint32_t b, int K, int k) {
  return markers + (uint64_t(b) * K + k) * kMarkerStrideWords;
}

// Clock spin for `cycles` of this SM's clock (the probe's spin gap: compute time, not a common start).
__device__ __forceinline__ void spin_cycles(uint64_t cycles) {
  const uint64_t start = ptx::clock_cycles();
  while (ptx::clock_cycles() - start < cycles) {
  }
}

// Burst id the warm-up writes: never one of a run's bursts (kMaxBursts bounds them).
constexpr uint32_t kWarmupBurst = 0xFFFFFFF0u;

__global__ void __launch_bounds__(1024) sm90_visible_producer(const ProducerParams p) {
  extern __shared__ uint64_t rec[];  // [bursts * 3], written out after the run
  const int k = blockIdx.x;

  // Warm-up: touch every slot and marker line this producer will write
  // (address translations cached), let it become visible, gather all
  // producers, then wait for the stage to drain.
  const uint32_t slots_used = p.slots < p.bursts ? p.slots : p.bursts;
  for (uint32_t s = 0; s < slots_used; ++s)
    store_chunk(p.dst + s * p.slot_bytes + uint64_t(k) * p.chunk_bytes, p.chunk_bytes, kWarmupBurst);
  for (uint32_t b = threadIdx.x; b < p.bursts; b += blockDim.x) ptx::st_global_b64(marker_at(p.markers, b, p.K, k), 0);
  ptx::fence_sc_sys();
  __syncthreads();
  // All producers are resident (the host checks the occupancy); the wait
  // times out into the record; all start at one global-timer instant.
  grid_start_after(p.start_barrier, p.K, p.timeout_ns, p.timeout_record, p.settle_ns);

  for (uint32_t b = 0; b < p.bursts; ++b) {
    uint8_t* chunk = p.dst + (b % p.slots) * p.slot_bytes + uint64_t(k) * p.chunk_bytes;
    __syncthreads();
    if (threadIdx.x == 0) rec[3 * b] = ptx::globaltimer_ns();
    store_chunk(chunk, p.chunk_bytes, b);
    __syncthreads();  // every thread has issued its stores
    if (threadIdx.x == 0) {
      rec[3 * b + 1] = ptx::globaltimer_ns();
      if (p.fenced_markers) {
        // The barrier orders the CTA's stores before thread 0's fence, which is
        // cumulative: whoever sees the marker sees the burst's data.
        ptx::fence_acq_rel_sys();
        rec[3 * b + 2] = ptx::globaltimer_ns();
        ptx::st_release_sys_u64(marker_at(p.markers, b, p.K, k), marker_value(b));
      } else {
        // No ordering: the marker joins the same queues right behind the
        // burst's stores, and the issuer never waits for the far end.
        rec[3 * b + 2] = rec[3 * b + 1];
        asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(marker_at(p.markers, b, p.K, k)),
                     "l"(marker_value(b))
                     : "memory");
      }
    }
    spin_cycles(p.gap_cycles);
  }
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < 3 * p.bursts; i += blockDim.x) {
    const uint32_t b = i / 3, field = i % 3;
    p.log[(uint64_t(b) * p.K + k) * 3 + field] = rec[i];
  }
}

// Records the first failure only (several threads may time out at once).
__device__ inline void report_status(uint64_t* status, uint64_t code, uint64_t burst, uint64_t producer,
                                     uint64_t seen, uint64_t expected, uint64_t waited_ns) {
  if (atomicCAS(reinterpret_cast<unsigned long long*>(status), 0ull, static_cast<unsigned long long>(code)) != 0ull)
    return;
  status[1] = burst;
  status[2] = producer;
  status[3] = seen;
  status[4] = expected;
  status[5] = waited_ns;
  __threadfence_system();
}

// Whether word w of producer k's chunk of burst b holds the data of b or of a
// later burst that reused the slot (bursts rotate over p.slots slots).
__device__ inline bool chunk_word_ok(const PollerParams& p, uint32_t b, int k, uint32_t w) {
  const uint8_t* at = p.dst + (b % p.slots) * p.slot_bytes + uint64_t(k) * p.chunk_bytes + 4ull * w;
  const uint32_t v = ptx::ld_relaxed_sys_u32(at);
  for (uint32_t later = b; later < p.bursts; later += p.slots)
    if (v == data_word(later, w)) return true;
  return false;
}

// One CTA; thread t watches producers t, t + blockDim.x, ... and, for each,
// its markers in burst order (a producer's bursts are published in order).
__global__ void __launch_bounds__(1024) visible_poller(const PollerParams p) {
  extern __shared__ uint32_t next_burst[];  // [K]
  for (int k = threadIdx.x; k < p.K; k += blockDim.x) next_burst[k] = 0;
  __syncthreads();
  const uint64_t t_start = ptx::globaltimer_ns();
  uint64_t left = 0;
  for (int k = threadIdx.x; k < p.K; k += blockDim.x) left += p.bursts;
  uint64_t last = t_start, longest_pass = 0;
  const uint32_t last_word = p.chunk_bytes / 4 - 1;
  while (left > 0) {
    for (int k = threadIdx.x; k < p.K; k += blockDim.x) {
      uint32_t b = next_burst[k];
      while (b < p.bursts) {
        const uint64_t v = ptx::ld_acquire_sys_u64(p.markers + (uint64_t(b) * p.K + k) * kMarkerStrideWords);
        if (v == 0) break;
        const uint64_t t = ptx::globaltimer_ns();
        if (v != marker_value(b)) {
          report_status(p.status, kWrongValue, b, k, v, marker_value(b), t - t_start);
          return;
        }
        p.seen_ns[uint64_t(b) * p.K + k] = t;
        if (!chunk_word_ok(p, b, k, last_word)) atomicAdd(p.data_mismatches, 1ull);
        ++b;
        --left;
      }
      next_burst[k] = b;
    }
    const uint64_t now = ptx::globaltimer_ns();
    longest_pass = now - last > longest_pass ? now - last : longest_pass;
    last = now;
    if (left > 0 && now - t_start > p.timeout_ns) {
      for (int k = threadIdx.x; k < p.K; k += blockDim.x) {
        const uint32_t b = next_burst[k];
        if (b >= p.bursts) continue;
        const uint64_t v = ptx::ld_relaxed_sys_u64(p.markers + (uint64_t(b) * p.K + k) * kMarkerStrideWords);
        report_status(p.status, kTimeout, b, k, v, marker_value(b), now - t_start);
        break;
      }
      break;
    }
  }
  atomicMax(p.max_poll_ns, static_cast<unsigned long long>(longest_pass));
}

// One thread: answers round n of the CPU's ping with its %globaltimer.
__global__ void ping_responder(const PingParams p) {
  for (int n = 1; n <= p.rounds; ++n) {
    const uint64_t t0 = ptx::globaltimer_ns();
    uint64_t v = ptx::ld_acquire_sys_u64(p.request);
    while (v != uint64_t(n)) {
      if (v == kQuitRequest) {
        report_status(p.status, kQuit, n, 0, v, n, ptx::globaltimer_ns() - t0);
        return;
      }
      const uint64_t waited = ptx::globaltimer_ns() - t0;
      if (waited > p.timeout_ns) {
        report_status(p.status, kTimeout, n, 0, v, n, waited);
        return;
      }
      v = ptx::ld_acquire_sys_u64(p.request);
    }
    const uint64_t g = ptx::globaltimer_ns();
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p.response), "l"(g) : "memory");
    ptx::st_release_sys_u64(p.response + 1, uint64_t(n));  // the time is visible before the round number
  }
}

// The smallest step of %globaltimer seen in up to 256 changes or max_ns:
// out[0] = smallest step, out[1] = changes seen, out[2] = span of those changes (ns).
__global__ void timer_resolution(uint64_t* out, uint64_t max_ns) {
  const uint64_t t0 = ptx::globaltimer_ns();
  uint64_t prev = t0, smallest = ~0ull, changes = 0;
  while (changes < 256) {
    const uint64_t t = ptx::globaltimer_ns();
    if (t != prev) {
      smallest = t - prev < smallest ? t - prev : smallest;
      prev = t;
      ++changes;
    }
    if (t - t0 > max_ns) break;
  }
  out[0] = smallest;
  out[1] = changes;
  out[2] = prev - t0;
}

// Counts destination words that differ from the last burst written to each slot.
__global__ void visible_verify(const ProducerParams p, unsigned long long* mismatches) {
  const uint32_t slots_used = p.slots < p.bursts ? p.slots : p.bursts;
  const uint64_t words = p.slot_bytes / 4 * slots_used;
  const uint32_t* dst = reinterpret_cast<const uint32_t*>(p.dst);
  unsigned long long bad = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < words; i += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t byte = i * 4;
    const uint32_t s = static_cast<uint32_t>(byte / p.slot_bytes);
    const uint32_t last = s + p.slots * ((p.bursts - 1 - s) / p.slots);
    const uint32_t w = static_cast<uint32_t>((byte % p.slot_bytes % p.chunk_bytes) / 4);
    bad += dst[i] != data_word(last, w);
  }
  if (bad) atomicAdd(mismatches, bad);
}

}  // namespace xstage::visible
