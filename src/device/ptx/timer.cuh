#pragma once
// Clocks readable from a kernel. %globaltimer is in ns and shared by all SMs
// (coarse: it ticks every ~32 ns on Hopper, 1 us on some older parts);
// clock64 counts this SM's cycles.
#include <cstdint>

namespace xstage::ptx {

__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint64_t clock_cycles() {
  uint64_t c;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
  return c;
}

}  // namespace xstage::ptx
