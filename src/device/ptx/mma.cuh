#pragma once
// Warp-level tensor-core MMA (mma.sync, sm_80+): D = A * B + C with bf16
// inputs and fp32 accumulators, m16n8k16. Used as "real" tensor work in gaps.
#include <cstdint>

namespace xstage::ptx {

__device__ __forceinline__ void mma_m16n8k16_bf16_f32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

}  // namespace xstage::ptx
