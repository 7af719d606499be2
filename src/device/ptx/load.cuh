#pragma once
// Loads through the non-coherent (read-only) path, one named wrapper per
// width. Only for data no thread writes while the kernel runs (a copy's source).
#include <cstdint>

namespace xstage::ptx {

__device__ __forceinline__ uint8_t ld_global_nc_b8(const void* src) {
  uint16_t v;  // PTX has no 8-bit registers: the byte lands in a 16-bit one
  asm volatile("ld.global.nc.b8 %0, [%1];" : "=h"(v) : "l"(src));
  return static_cast<uint8_t>(v);
}

__device__ __forceinline__ uint16_t ld_global_nc_b16(const void* src) {
  uint16_t v;
  asm volatile("ld.global.nc.b16 %0, [%1];" : "=h"(v) : "l"(src));
  return v;
}

__device__ __forceinline__ uint32_t ld_global_nc_b32(const void* src) {
  uint32_t v;
  asm volatile("ld.global.nc.b32 %0, [%1];" : "=r"(v) : "l"(src));
  return v;
}

__device__ __forceinline__ uint64_t ld_global_nc_b64(const void* src) {
  uint64_t v;
  asm volatile("ld.global.nc.b64 %0, [%1];" : "=l"(v) : "l"(src));
  return v;
}

// 16 bytes: src must be 16-byte aligned.
__device__ __forceinline__ uint4 ld_global_nc_v4_b32(const void* src) {
  uint4 v;
  asm volatile("ld.global.nc.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(src));
  return v;
}

}  // namespace xstage::ptx
