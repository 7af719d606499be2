#pragma once
// The narrow stores that store.cuh leaves out: for tails and for element
// sizes or alignments below 4 bytes.
#include <cstdint>

namespace xstage::ptx {

__device__ __forceinline__ void st_global_b8(void* dst, uint8_t v) {
  asm volatile("st.global.b8 [%0], %1;" ::"l"(dst), "h"(static_cast<uint16_t>(v)) : "memory");
}

__device__ __forceinline__ void st_global_b16(void* dst, uint16_t v) {
  asm volatile("st.global.b16 [%0], %1;" ::"l"(dst), "h"(v) : "memory");
}

}  // namespace xstage::ptx
