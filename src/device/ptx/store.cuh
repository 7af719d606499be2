#pragma once
// Remote and local stores, one named wrapper per width. The address may point
// to local device memory, a peer GPU's memory (peer access / NVLink) or pinned
// host memory mapped into the device (PCIe posted writes): the instruction is
// the same, the X-Stage behind it is not.
#include <cstdint>

namespace xstage::ptx {

__device__ __forceinline__ void st_global_b32(void* dst, uint32_t v) {
  asm volatile("st.global.b32 [%0], %1;" ::"l"(dst), "r"(v) : "memory");
}

__device__ __forceinline__ void st_global_b64(void* dst, uint64_t v) {
  asm volatile("st.global.b64 [%0], %1;" ::"l"(dst), "l"(v) : "memory");
}

// 16-byte vector store: the widest a thread can issue.
__device__ __forceinline__ void st_global_v4_b32(void* dst, uint4 v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

// The same with a cache operator. .wt: write-through to system memory (a
// store to a host address is not kept dirty in L2); .cs: streaming, evict
// first. Plain st.global is .wb (write-back).
__device__ __forceinline__ void st_global_wt_v4_b32(void* dst, uint4 v) {
  asm volatile("st.global.wt.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

__device__ __forceinline__ void st_global_cs_v4_b32(void* dst, uint4 v) {
  asm volatile("st.global.cs.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

}  // namespace xstage::ptx
