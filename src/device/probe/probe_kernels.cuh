#pragma once
// Device side of the X-Stage probe. One CTA is one producer; an optional
// extra CTA is the receiver that watches the release flags.
#include <cstdint>

#include "device/comm/grid_start.cuh"
#include "device/ptx/bulk_copy.cuh"
#include "device/ptx/fence.cuh"
#include "device/ptx/flags.cuh"
#include "device/ptx/mma.cuh"
#include "device/ptx/store.cuh"
#include "device/ptx/timer.cuh"
#include "device/probe/probe_params.hpp"

namespace xstage::probe {

__host__ __device__ inline uint32_t burst_tag(uint32_t b) { return 0x5EED0000u ^ (b * 0x9E3779B9u + 0x7F4A7C15u); }

__device__ __forceinline__ uint32_t pattern(uint32_t tag, uint32_t word_in_chunk) {
  return tag ^ ((word_in_chunk & (kTileWords - 1)) * 0x85EBCA6Bu);
}

template <StoreKind S>
__device__ __forceinline__ void issue_burst(uint8_t* chunk, uint32_t chunk_bytes, uint32_t tag, const uint32_t* tile) {
  const uint32_t tid = threadIdx.x, nt = blockDim.x;
  if constexpr (S == StoreKind::v4) {
    for (uint32_t i = tid; i < chunk_bytes / 16; i += nt) {
      const uint32_t w = 4 * i;
      ptx::st_global_v4_b32(chunk + 16ull * i,
                            make_uint4(pattern(tag, w), pattern(tag, w + 1), pattern(tag, w + 2), pattern(tag, w + 3)));
    }
  } else if constexpr (S == StoreKind::b64) {
    for (uint32_t i = tid; i < chunk_bytes / 8; i += nt) {
      const uint32_t w = 2 * i;
      ptx::st_global_b64(chunk + 8ull * i, (uint64_t(pattern(tag, w + 1)) << 32) | pattern(tag, w));
    }
  } else if constexpr (S == StoreKind::b32) {
    for (uint32_t i = tid; i < chunk_bytes / 4; i += nt) ptx::st_global_b32(chunk + 4ull * i, pattern(tag, i));
  } else {
    // One bulk copy per tile-sized piece, spread over the threads. The burst
    // counts as issued when the TMA unit has read the source tile back out of
    // shared memory (wait_group.read): only then may the tile be rewritten.
    const uint32_t pieces = (chunk_bytes + kTileBytes - 1) / kTileBytes;
    for (uint32_t i = tid; i < pieces; i += nt) {
      const uint32_t off = i * kTileBytes;
      const uint32_t n = chunk_bytes - off < kTileBytes ? chunk_bytes - off : kTileBytes;
      ptx::bulk_store_s2g(chunk + off, tile, n);
    }
    ptx::bulk_commit_group();
    ptx::bulk_wait_group_read_all();
  }
}

// Useful work for gap_cycles cycles of this SM's clock.
template <GapKind G>
__device__ __forceinline__ void gap_work(uint64_t gap_cycles, float& acc) {
  if (gap_cycles == 0) return;
  const uint64_t start = ptx::clock_cycles();
  if constexpr (G == GapKind::spin) {
    while (ptx::clock_cycles() - start < gap_cycles) {
    }
  } else if constexpr (G == GapKind::fma) {
    float a = acc, b = acc * 0.5f + 1.0f, c = acc * 0.25f + 2.0f, d = acc + 3.0f;
    while (ptx::clock_cycles() - start < gap_cycles) {
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        a = fmaf(a, 0.9999f, 1e-3f);
        b = fmaf(b, 0.9998f, 2e-3f);
        c = fmaf(c, 0.9997f, 3e-3f);
        d = fmaf(d, 0.9996f, 4e-3f);
      }
    }
    acc = a + b + c + d;
  } else {
    uint32_t av[4], bv[2];
    const uint32_t seed = __float_as_uint(acc) | 0x3F803F80u;  // two bf16 values near 1
#pragma unroll
    for (int i = 0; i < 4; ++i) av[i] = seed ^ (i << 3);
    bv[0] = seed;
    bv[1] = seed ^ 0x10u;
    float d[4] = {acc, 0.f, 0.f, 0.f};
    // mma.sync needs the whole warp: lane 0 decides for all of it.
    while (__shfl_sync(0xffffffffu, ptx::clock_cycles() - start < gap_cycles, 0)) {
#pragma unroll
      for (int i = 0; i < 8; ++i) ptx::mma_m16n8k16_bf16_f32(d, av, bv);
    }
    acc = d[0] + d[1] + d[2] + d[3];
  }
}

__device__ inline void receive_flags(const KernelParams& p) {
  // One warp; lane l watches producer l*K/32 (every producer when K <= 32).
  const int lane = threadIdx.x;
  if (lane >= 32) return;
  const int watched = p.K < 32 ? p.K : 32;
  const int producer = lane * p.K / watched;
  for (uint32_t b = 0; b < p.bursts; ++b) {
    bool ok = true;
    if (lane < watched) {
      const uint64_t* flag = p.flags + producer;
      const auto poll = [flag] { return ptx::ld_acquire_sys_u64(flag); };
      ok = remote::wait_geq(poll, poll(), b + 1, remote::start_wait(p.timeout_ns, p.timeout_record), /*rank=*/0,
                            producer, /*sleep_ns=*/64);
    }
    // A timed-out wait leaves the record for the host; the others then stop too.
    if (!__all_sync(0xffffffffu, ok)) return;
    if (lane == 0) p.visible_ns[b] = ptx::globaltimer_ns();
  }
}

// What one producer's burst looked like, kept in shared memory until the end.
// The issue span of burst b is derived on the host as the time from its start
// to the next burst's start minus the gap actually computed: everything the
// issuer spent not computing. Reading a clock around the stores alone is not
// enough: a store the issuer makes afterwards (bookkeeping, even to shared
// memory) waits in the SM's memory-instruction queue behind the stalled
// remote stores, so part of the stall would fall outside the span.
struct BurstRecord {
  uint64_t start_ns;      // global timer at the burst's start
  uint64_t start_cycles;  // SM clock at the burst's start
  uint32_t gap_cycles;    // cycles spent in the gap after the burst
  uint32_t fence_cycles;  // start to fence return (completion == fence)
};
static_assert(sizeof(BurstRecord) == 24, "records are 24 bytes in shared memory");

template <StoreKind S, GapKind G>
__global__ void __launch_bounds__(1024) sm90_probe_bursts(const KernelParams p) {
  __shared__ alignas(128) uint32_t tile[S == StoreKind::bulk ? kTileWords : 1];
  extern __shared__ BurstRecord records[];  // [p.bursts]
  const int k = blockIdx.x;
  if (k == p.K) {
    receive_flags(p);
    return;
  }
  float acc = 1.0f + 1e-3f * (threadIdx.x + k);

  // Warm-up: touch every slot this producer will write (address translations
  // cached, pages resident), wait until it is visible, then let the stage empty.
  if constexpr (S == StoreKind::bulk) {
    for (uint32_t w = threadIdx.x; w < kTileWords; w += blockDim.x) tile[w] = pattern(0, w);
    ptx::fence_proxy_async_shared();
    __syncthreads();
  }
  for (uint32_t s = 0; s < p.slots_warm; ++s)
    issue_burst<S>(p.dst + s * p.slot_bytes + uint64_t(k) * p.chunk_bytes, p.chunk_bytes, 0, tile);
  if constexpr (S == StoreKind::bulk) ptx::bulk_wait_group_all();
  ptx::fence_sc_sys();
  __syncthreads();
  // Producers leave the warm-up at different times (it is throttled by the
  // stage too): gather them all, then settle together, so that the measured
  // bursts start on an empty stage at the same moment.
  // The first bursts start at one instant of the global timer, plus each
  // producer's stagger (grid_start.cuh says why not a cycle spin).
  grid_start_after(p.start_barrier, p.K, p.timeout_ns, p.timeout_record,
                   p.settle_ns + (p.K > 1 ? p.stagger_ns * uint64_t(k) / uint64_t(p.K - 1) : 0));
  uint64_t calib_t0 = 0, calib_c0 = 0;  // the measured run starts here
  if (threadIdx.x == 0) {
    calib_t0 = ptx::globaltimer_ns();
    calib_c0 = ptx::clock_cycles();
  }

  for (uint32_t b = 0; b < p.bursts; ++b) {
    uint8_t* chunk = p.dst + (b % p.slots) * p.slot_bytes + uint64_t(k) * p.chunk_bytes;
    const uint32_t tag = burst_tag(b);
    if constexpr (S == StoreKind::bulk) {
      for (uint32_t w = threadIdx.x; w < kTileWords; w += blockDim.x) tile[w] = pattern(tag, w);
      ptx::fence_proxy_async_shared();  // ordinary smem writes -> visible to the TMA unit
    }
    __syncthreads();
    uint64_t c0 = 0;
    if (threadIdx.x == 0) {
      c0 = ptx::clock_cycles();
      records[b] = {ptx::globaltimer_ns(), c0, 0u, 0u};
    }
    issue_burst<S>(chunk, p.chunk_bytes, tag, tile);
    __syncthreads();
    if (p.completion == BurstCompletion::fence) {
      if constexpr (S == StoreKind::bulk) ptx::bulk_wait_group_all();
      ptx::fence_sc_sys();
      __syncthreads();
      if (threadIdx.x == 0) records[b].fence_cycles = static_cast<uint32_t>(ptx::clock_cycles() - c0);
    } else if (p.completion == BurstCompletion::flag) {
      if constexpr (S == StoreKind::bulk) {
        ptx::bulk_wait_group_all();  // each issuing thread's copies are written...
        __syncthreads();             // ...before thread 0 releases the flag
      }
      if (threadIdx.x == 0) {
        ptx::fence_acq_rel_sys();  // cumulative over the CTA's stores ordered by the barrier above
        ptx::st_release_sys_u64(p.flags + k, b + 1);
      }
    }
    const uint64_t g0 = ptx::clock_cycles();
    gap_work<G>(p.gap_cycles, acc);
    if (threadIdx.x == 0) records[b].gap_cycles = static_cast<uint32_t>(ptx::clock_cycles() - g0);
  }
  if constexpr (S == StoreKind::bulk) ptx::bulk_wait_group_all();
  __syncthreads();  // the last burst ends when every thread has issued its stores
  if (threadIdx.x == 0) {
    p.calib[4 * k + 0] = calib_t0;
    p.calib[4 * k + 1] = calib_c0;
    p.calib[4 * k + 2] = ptx::globaltimer_ns();
    p.calib[4 * k + 3] = ptx::clock_cycles();
  }
  __syncthreads();
  for (uint32_t b = threadIdx.x; b < p.bursts; b += blockDim.x) {
    p.start_cycles[b * p.K + k] = records[b].start_cycles;
    p.gap_cycles_done[b * p.K + k] = records[b].gap_cycles;
    p.fence_cycles[b * p.K + k] = records[b].fence_cycles;
    p.start_ns[b * p.K + k] = records[b].start_ns;
  }
  if (acc == -1.2345f) p.sink[k] = acc;  // never true; the compiler cannot know
}

// Counts destination words that differ from the last burst written to each slot.
__global__ void verify_destination(const uint32_t* dst, uint64_t slot_bytes, uint32_t slots_written, uint32_t slots,
                                   uint32_t bursts, uint32_t chunk_bytes, unsigned long long* mismatches) {
  const uint64_t words = slot_bytes / 4 * slots_written;
  unsigned long long bad = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < words; i += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t byte = i * 4;
    const uint32_t s = static_cast<uint32_t>(byte / slot_bytes);
    const uint64_t in_slot = byte % slot_bytes;
    const uint32_t last = s + slots * ((bursts - 1 - s) / slots);
    const uint32_t word_in_chunk = static_cast<uint32_t>((in_slot % chunk_bytes) / 4);
    bad += dst[i] != pattern(burst_tag(last), word_in_chunk);
  }
  if (bad) atomicAdd(mismatches, bad);
}

__global__ void calibrate_clock(uint64_t ns, uint64_t* out) {
  const uint64_t t0 = ptx::globaltimer_ns(), c0 = ptx::clock_cycles();
  while (ptx::globaltimer_ns() - t0 < ns) {
  }
  out[0] = ptx::globaltimer_ns() - t0;
  out[1] = ptx::clock_cycles() - c0;
}

}  // namespace xstage::probe
