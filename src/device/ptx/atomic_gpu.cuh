#pragma once
// Counters shared by the CTAs of one GPU (GPU scope): work claimed from a
// global counter, tiles counted done. A relaxed load reads a counter that may
// be stale (a decision only: the atomic add that follows gives the tile); a release add after a
// tile's stores and an acquire load before its consumer's reads carry the
// data between CTAs.
#include <cstdint>

namespace xstage::ptx {

__device__ __forceinline__ int ld_relaxed_gpu_s32(const int32_t* p) {
  int v;
  asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ int ld_acquire_gpu_s32(const int32_t* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_release_gpu_add_s32(int32_t* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t smid() {
  uint32_t v;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(v));
  return v;
}

}  // namespace xstage::ptx
