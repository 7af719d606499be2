#pragma once
// Warpgroup-level tensor-core MMA (wgmma.mma_async, sm_90a): a warpgroup (4
// consecutive warps, the first one's index a multiple of 4) computes
// D (64 x N, fp32 in registers) += A (64 x 16, bf16) * B (16 x N, bf16).
// B always comes from shared memory through a matrix descriptor; A from a
// descriptor (the "SS" form) or from registers (the "RS" form).
//
// Register layouts (PTX ISA, "Register Fragments"), warp w of the warpgroup,
// g = lane / 4, t = lane % 4, per 8-column block nb of D:
//   D: d[nb][0..1] = row 16w + g, columns 8nb + 2t, +1; d[nb][2..3] = row 16w + g + 8
//      (exactly the mma.sync m16n8 C fragment, stacked over the 4 warps);
//   A (RS): a[0] = (row 16w + g, k 2t..2t+1), a[1] = (row + 8, k 2t..), a[2] = (row, k 2t+8..),
//      a[3] = (row + 8, k 2t+8..), two bf16 a register, low half first (the mma.sync A fragment).
// So the fp32 accumulators of n blocks 2j, 2j+1 of one GEMM, packed to bf16,
// are the A operand of k step j of the next: P never leaves the registers.
//
// Ordering: wgmma_fence() before the first wgmma of a batch whenever the
// accumulator or A registers were written by other instructions; then
// commit_group(); wait_group<N>() returns when at most N committed groups are
// still pending. The compiler does not know that the asm writes its outputs
// asynchronously: fence_operands() after the wait pins every later use of the
// accumulators behind it.
#include <cstdint>

#include "device/ptx/wgmma_generated.cuh"

namespace xstage::ptx {

// ---- shared-memory matrix descriptors (PTX ISA, "Matrix Descriptor Format")
// bits 0-13: start address >> 4; 16-29: leading-dimension byte offset >> 4;
// 32-45: stride-dimension byte offset >> 4; 49-51: base offset (0: every
// operand here starts on a 1024-byte swizzle-pattern boundary, or 32-byte
// steps inside one, which the hardware resolves from the address bits);
// 62-63: swizzle mode, 1 = 128-byte.
//
// 128-byte swizzle, the layout the TMA unit writes with CU_TENSOR_MAP_SWIZZLE_128B:
// rows of 128 bytes (64 bf16), 8 rows form a 1024-byte atom, and the 16-byte
// chunk c of row r sits at chunk c ^ (r % 8).
//   K-major operand (rows = M or N, 64 k-values a row): SBO = 1024 (next 8 rows);
//     LBO unused (1). A k step of 16 inside the atom adds 32 bytes to the start.
//   MN-major operand (rows = k, 64 m/n-values a row): SBO = 1024 (next 8 k rows),
//     LBO = byte distance to the next 64 m/n-values (the next column block).
__device__ __forceinline__ uint64_t make_smem_desc_sw128(uint32_t smem_byte_addr, uint32_t lbo_bytes,
                                                         uint32_t sbo_bytes) {
  return uint64_t((smem_byte_addr & 0x3FFFFu) >> 4) | (uint64_t((lbo_bytes >> 4) & 0x3FFFu) << 16) |
         (uint64_t((sbo_bytes >> 4) & 0x3FFFu) << 32) | (uint64_t(1) << 62);
}

// Moves a descriptor's start address by `bytes` (a multiple of 16; the address
// field is the low 14 bits and holds address >> 4, so no carry leaves it for
// addresses inside the 256 KiB shared window).
__device__ __forceinline__ uint64_t smem_desc_advance(uint64_t desc, uint32_t bytes) {
  return desc + uint64_t(bytes >> 4);
}

// Byte offset of bf16 element (row, col), col < 64, in a 128-byte-swizzled
// tile that starts on a 1024-byte boundary (the layout above; what an operand
// written by ordinary stores instead of the TMA unit must follow).
__host__ __device__ constexpr uint32_t sw128_offset(uint32_t row, uint32_t col) {
  return row * 128 + (((col / 8) ^ (row % 8)) * 16) + (col % 8) * 2;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit_group() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
  static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0..7");
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Ties registers to this point of the instruction stream (no code emitted).
template <int NB>
__device__ __forceinline__ void fence_operands(float (&d)[NB][4]) {
#pragma unroll
  for (int i = 0; i < NB; ++i)
    asm volatile("" : "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])::"memory");
}
template <int NB>
__device__ __forceinline__ void fence_operands(uint32_t (&a)[NB][4]) {
#pragma unroll
  for (int i = 0; i < NB; ++i) asm volatile("" : "+r"(a[i][0]), "+r"(a[i][1]), "+r"(a[i][2]), "+r"(a[i][3])::"memory");
}

// ---- the MMA itself, for every N the instruction allows (8..256, step 8);
// WgmmaBf16<N> in ptx/wgmma_generated.cuh (scripts/gen_wgmma.py) spells out
// each N's asm statement, since an operand list cannot be built from a template.
template <int N>
inline constexpr bool is_wgmma_n = N >= 8 && N <= 256 && N % 8 == 0;

// D (+)= A * B, A (64 x 16) and B (16 x N) from shared-memory descriptors.
// TransA = 0: A K-major (rows of m, k contiguous), 1: M-major. TransB = 0: B
// K-major (rows of n, so D = A * B^T for a row-major B^T), 1: N-major.
// ScaleA/ScaleB = -1 negate that operand. scale_d = 0: D = A * B (old D ignored).
template <int N, int TransA, int TransB, int ScaleA = 1, int ScaleB = 1>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  static_assert(is_wgmma_n<N>, "wgmma N: a multiple of 8 in 8..256");
  static_assert((TransA | TransB) >> 1 == 0 && (ScaleA == 1 || ScaleA == -1) && (ScaleB == 1 || ScaleB == -1));
  WgmmaBf16<N>::template ss<ScaleA, ScaleB, TransA, TransB>(d, desc_a, desc_b, scale_d);
}

// D (+)= A * B, A from registers (the fragment above; always K-major), B from a descriptor.
template <int N, int TransB, int ScaleA = 1, int ScaleB = 1>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t desc_b,
                                         int scale_d) {
  static_assert(is_wgmma_n<N>, "wgmma N: a multiple of 8 in 8..256");
  static_assert(TransB >> 1 == 0 && (ScaleA == 1 || ScaleA == -1) && (ScaleB == 1 || ScaleB == -1));
  WgmmaBf16<N>::template rs<ScaleA, ScaleB, TransB>(d, a, desc_b, scale_d);
}

// D (+)= A * B^T with A (64 x 16) and B (N x 16) both K-major in shared memory.
template <int N>
__device__ __forceinline__ void wgmma_ss_bf16(float (&d)[N / 8][4], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  wgmma_ss<N, 0, 0>(d, desc_a, desc_b, scale_d);
}

// D (+)= A * B^T with A (64 x 32) and B (N x 32) FP8 e4m3, both K-major in shared memory.
template <int N>
__device__ __forceinline__ void wgmma_ss_e4m3(float (&d)[N / 8][4], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  static_assert(is_wgmma_n<N>, "wgmma N: a multiple of 8 in 8..256");
  WgmmaE4m3<N>::template ss<1, 1>(d, desc_a, desc_b, scale_d);
}

// D (+)= A * B with A from registers and B (16 x N) MN-major in shared memory
// (N is the contiguous dimension, e.g. V stored [key][d]).
template <int N>
__device__ __forceinline__ void wgmma_rs_bf16_tb(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t desc_b,
                                                 int scale_d) {
  wgmma_rs<N, 1>(d, a, desc_b, scale_d);
}

}  // namespace xstage::ptx
