#pragma once
// Time stamps of the fused kernel's end, for performance experiments only
// (XSTAGE_ULYSSES_EXPERIMENT with kExperimentTrace; docs/perf-log.md, f9):
// when each CTA has published its flags (globaltimer, slot blockIdx.x of
// p.trace) and, from the waiting CTA, when its wait begins (globaltimer, slot
// kTraceMaxGrid), clock64 cycles from then until its first batch of flags is
// back (+ 1), its loop is done (+ 2) and its fence is done (+ 3), the sleeps
// and loads (+ 4, + 5), the maximum or sum over its threads, and the
// globaltimer when its loop is done (+ 6). No-ops when not tracing.
#include <cstdint>

#include "device/attention/ulysses_params.hpp"
#include "device/ptx/timer.cuh"

namespace xstage::attention {

__device__ __forceinline__ bool tracing(const UlyssesStoreParams& p) {
  return (p.experiment & kExperimentTrace) && p.trace != nullptr;
}

// When this CTA's flags are published (slot blockIdx.x), and when the wait begins (slot kTraceMaxGrid).
__device__ __forceinline__ void trace_published(const UlyssesStoreParams& p) {
  if (tracing(p) && blockIdx.x < kTraceMaxGrid) p.trace[blockIdx.x] = ptx::globaltimer_ns();
}
__device__ __forceinline__ void trace_wait_start(const UlyssesStoreParams& p) {
  if (tracing(p)) p.trace[kTraceMaxGrid] = ptx::globaltimer_ns();
}

struct WaitTrace {
  unsigned long long* slot = nullptr;  // nullptr: not tracing
  uint64_t c0 = 0;
  unsigned long long sleeps = 0, loads = 0;
  bool first = true;

  __device__ __forceinline__ explicit WaitTrace(const UlyssesStoreParams& p) {
    if (!tracing(p)) return;
    slot = p.trace + kTraceMaxGrid;
    c0 = ptx::clock_cycles();
  }
  __device__ __forceinline__ void load() {
    if (slot) ++loads;
  }
  __device__ __forceinline__ void sleep() {
    if (slot) ++sleeps;
  }
  // After a batch's loads are back (`least` depends on them, so the clock is read after).
  __device__ __forceinline__ void batch_back(uint64_t least) {
    if (slot && first && least != 0) atomicMax(slot + 1, (unsigned long long)(ptx::clock_cycles() - c0));
    first = false;
  }
  __device__ __forceinline__ void loop_done() {
    if (!slot) return;
    atomicMax(slot + 2, (unsigned long long)(ptx::clock_cycles() - c0));
    atomicMax(slot + 6, (unsigned long long)ptx::globaltimer_ns());
  }
  __device__ __forceinline__ void fence_done() {
    if (!slot) return;
    atomicMax(slot + 3, (unsigned long long)(ptx::clock_cycles() - c0));
    atomicAdd(slot + 4, sleeps);
    atomicAdd(slot + 5, loads);
  }
};

}  // namespace xstage::attention
