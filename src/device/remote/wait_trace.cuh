#pragma once
// Time stamps of a fused kernel's end, a diagnostic (remote/diagnostics.hpp,
// kDiagTrace; perf-log f9): when each CTA has published its flags
// (globaltimer, slot blockIdx.x of p.trace) and, from the waiting CTA, when
// its wait begins (globaltimer, slot kTraceMaxGrid), clock64 cycles from then
// until its first batch of flags is back (+ 1), its loop is done (+ 2) and
// its fence is done (+ 3), the sleeps and loads (+ 4, + 5), the maximum or
// sum over its threads, and the globaltimer when its loop is done (+ 6).
// Compiled to nothing without XSTAGE_DIAGNOSTICS.
#include <cstdint>

#include "device/ptx/timer.cuh"
#include "device/remote/diagnostics.hpp"

namespace xstage::remote {

template <class Params>
__device__ __forceinline__ bool tracing(const Params& p) {
  if constexpr (kDiagnostics)
    return (p.experiment & kDiagTrace) && p.trace != nullptr;
  else
    return false;
}

template <class Params>
__device__ __forceinline__ void trace_published(const Params& p) {
  if (tracing(p) && blockIdx.x < kTraceMaxGrid) p.trace[blockIdx.x] = ptx::globaltimer_ns();
}
// kDiagTileTrace: the globaltimer when the CTA's k-th tile is done (its
// rows stored or issued), so that the host sees how far the CTAs' tiles
// drift apart over the waves (perf-log f18).
template <class Params>
__device__ __forceinline__ void trace_tile_end(const Params& p, uint32_t k) {
  if constexpr (kDiagnostics) {
    if ((p.experiment & kDiagTileTrace) && p.trace != nullptr && blockIdx.x < kTraceMaxGrid && k < kTileTraceMax)
      p.trace[kTraceMaxGrid + kTraceSlots + uint64_t(blockIdx.x) * kTileTraceMax + k] = ptx::globaltimer_ns();
  }
}
template <class Params>
__device__ __forceinline__ void trace_wait_start(const Params& p) {
  if (tracing(p)) p.trace[kTraceMaxGrid] = ptx::globaltimer_ns();
}

struct WaitTrace {
  unsigned long long* slot = nullptr;  // nullptr: not tracing
  uint64_t c0 = 0;
  unsigned long long sleeps = 0, loads = 0;
  bool first = true;

  template <class Params>
  __device__ __forceinline__ explicit WaitTrace(const Params& p) {
    if (!tracing(p)) return;
    slot = p.trace + kTraceMaxGrid;
    c0 = ptx::clock_cycles();
  }
  __device__ __forceinline__ bool on() const { return kDiagnostics && slot != nullptr; }
  __device__ __forceinline__ void load() {
    if (on()) ++loads;
  }
  __device__ __forceinline__ void sleep() {
    if (on()) ++sleeps;
  }
  // After a batch's loads are back (`least` depends on them, so the clock is read after).
  __device__ __forceinline__ void batch_back(uint64_t least) {
    if (on() && first && least != 0) atomicMax(slot + 1, (unsigned long long)(ptx::clock_cycles() - c0));
    first = false;
  }
  __device__ __forceinline__ void loop_done() {
    if (!on()) return;
    atomicMax(slot + 2, (unsigned long long)(ptx::clock_cycles() - c0));
    atomicMax(slot + 6, (unsigned long long)ptx::globaltimer_ns());
  }
  __device__ __forceinline__ void fence_done() {
    if (!on()) return;
    atomicMax(slot + 3, (unsigned long long)(ptx::clock_cycles() - c0));
    atomicAdd(slot + 4, sleeps);
    atomicAdd(slot + 5, loads);
  }
};

}  // namespace xstage::remote
