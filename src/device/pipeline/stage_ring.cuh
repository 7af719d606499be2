#pragma once
// The producer/consumer ring of a warp-specialised sm_90a kernel: SLOTS
// slots in shared memory, each with a full barrier (the producer's arrival,
// plus the bytes its TMA copies announce) and an empty barrier (one arrival
// per consumer warp that has finished with the slot). Both sides count the
// same sequence of uses `it` = 0, 1, 2, ...; use it takes slot it % SLOTS in
// round it / SLOTS, whose parity is what the barriers are waited on with
// (ptx/mbarrier.cuh: a fresh barrier passes a wait on parity 1, so the
// producer's first round finds every slot free).
//
// The GEMM mainloop's k-block stages, the fused MoE layer's task hand-over
// and the attention kernel's Q, K, V and staged-output slots are all such
// rings: this is the only place that spells out the protocol.
#include <cstdint>

#include "device/ptx/mbarrier.cuh"

namespace xstage::pipeline {

template <int SLOTS>
struct StageRing {
  uint64_t* full;   // [SLOTS]
  uint64_t* empty;  // [SLOTS], right after full

  // bars: 2 * SLOTS barriers in shared memory.
  __device__ __forceinline__ explicit StageRing(uint64_t* bars) : full(bars), empty(bars + SLOTS) {}

  static constexpr int kBarriers = 2 * SLOTS;
  __device__ __forceinline__ static uint32_t slot(uint32_t it) { return it % SLOTS; }
  __device__ __forceinline__ static uint32_t parity(uint32_t it) { return (it / SLOTS) & 1; }

  // By one thread, before the CTA barrier that publishes the inits
  // (ptx::mbar_fence_init, __syncthreads).
  // producer_arrivals: 1 where one thread fills a slot (its TMA copies
  // count as bytes), more where many threads write it with ordinary stores.
  __device__ __forceinline__ void init(uint32_t consumer_arrivals, uint32_t producer_arrivals = 1) const {
    for (int s = 0; s < SLOTS; ++s) {
      ptx::mbar_init(full + s, producer_arrivals);
      ptx::mbar_init(empty + s, consumer_arrivals);
    }
  }

  // Producer: waits until use `it`'s slot is free and returns it.
  __device__ __forceinline__ uint32_t acquire(uint32_t it) const {
    const uint32_t s = slot(it);
    ptx::mbar_wait(empty + s, parity(it) ^ 1);
    return s;
  }
  // Producer: slot s will be full once `bytes` of TMA copies land on full[s].
  __device__ __forceinline__ void expect_bytes(uint32_t s, uint32_t bytes) const {
    ptx::mbar_arrive_expect_tx(full + s, bytes);
  }
  // Producer: slot s is full (what it wrote with ordinary stores, released).
  __device__ __forceinline__ void commit(uint32_t s) const { ptx::mbar_arrive(full + s); }

  // Consumer: waits until use `it`'s slot is full and returns it.
  __device__ __forceinline__ uint32_t wait(uint32_t it) const {
    const uint32_t s = slot(it);
    ptx::mbar_wait(full + s, parity(it));
    return s;
  }
  // Consumer (one lane a warp, or every thread: the init's count): done with slot s.
  __device__ __forceinline__ void release(uint32_t s) const { ptx::mbar_arrive(empty + s); }
};

}  // namespace xstage::pipeline
