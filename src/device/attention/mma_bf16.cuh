#pragma once
// Warp-level GEMMs of the attention mainloop on mma.sync m16n8k16 (bf16 in,
// fp32 accumulate). A warp owns 16 query rows. Fragment layouts (PTX ISA,
// "Matrix fragments for mma.m16n8k16"), with g = lane / 4, t = lane % 4:
//   A (16x16): a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..), a[3] = (g+8, 2t+8..)
//   B (16x8):  b[0] = (k 2t..2t+1, n g), b[1] = (k 2t+8.., n g)
//   C (16x8):  c[0..1] = (g, 2t..2t+1), c[2..3] = (g+8, 2t..2t+1)
// The mma.sync kernel's mainloop; the wgmma kernel has warpgroup GEMMs with
// operands in shared memory instead (ptx/wgmma.cuh).
#include <cstdint>

#include "device/ptx/ldmatrix.cuh"
#include "device/ptx/math.cuh"
#include "device/ptx/mma.cuh"

namespace xstage::attention {

// Q fragments of this warp's 16 rows, for every k step over D: q[kk] is the A
// operand of k step kk. `sq` points at the warp's first row in smem.
template <int D, int SMEM_STRIDE>
__device__ __forceinline__ void load_q_fragments(uint32_t (&q)[D / 16][4], const uint16_t* sq, int lane) {
  // matrices 0..3 = rows 0-7 / 8-15 at cols +0, then rows 0-7 / 8-15 at cols +8
  const uint16_t* row = sq + (lane & 15) * SMEM_STRIDE + (lane >> 4) * 8;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) ptx::ldmatrix_x4(q[kk], row + kk * 16);
}

// S (16 x BLOCK_N) = Q (16 x D) * K^T; K tile row-major [n][d] in smem is the
// "col" B operand as stored. s[nb] holds n block nb (8 columns).
template <int D, int BLOCK_N, int SMEM_STRIDE>
__device__ __forceinline__ void warp_gemm_qk(float (&s)[BLOCK_N / 8][4], const uint32_t (&q)[D / 16][4],
                                             const uint16_t* sk, int lane) {
#pragma unroll
  for (int nb = 0; nb < BLOCK_N / 8; ++nb) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
  // matrices: 0 = rows n0..+7 cols +0, 1 = rows n0..+7 cols +8, 2 = rows n0+8.. cols +0, 3 = rows n0+8.. cols +8
  const uint16_t* row = sk + ((lane & 7) + ((lane >> 4) << 3)) * SMEM_STRIDE + ((lane >> 3) & 1) * 8;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
    for (int np = 0; np < BLOCK_N / 16; ++np) {
      uint32_t r[4];
      ptx::ldmatrix_x4(r, row + np * 16 * SMEM_STRIDE + kk * 16);
      const uint32_t b0[2] = {r[0], r[1]};
      const uint32_t b1[2] = {r[2], r[3]};
      ptx::mma_m16n8k16_bf16_f32(s[2 * np], q[kk], b0);
      ptx::mma_m16n8k16_bf16_f32(s[2 * np + 1], q[kk], b1);
    }
  }
}

// O (16 x D) += P (16 x BLOCK_N, fp32 probabilities in the C layout) * V
// (BLOCK_N x D, row-major [n][d] in smem, read transposed by ldmatrix.trans).
// The C fragments of n blocks 2j, 2j+1 are exactly the A fragment of k step j.
template <int D, int BLOCK_N, int SMEM_STRIDE>
__device__ __forceinline__ void warp_gemm_pv(float (&o)[D / 8][4], const float (&p)[BLOCK_N / 8][4],
                                             const uint16_t* sv, int lane) {
  // matrices: 0 = rows n0..+7 cols +0, 1 = rows n0+8.. cols +0, 2 = rows n0..+7 cols +8, 3 = rows n0+8.. cols +8
  const uint16_t* row = sv + (lane & 15) * SMEM_STRIDE + (lane >> 4) * 8;
#pragma unroll
  for (int j = 0; j < BLOCK_N / 16; ++j) {
    const uint32_t a[4] = {ptx::pack_bf16x2(p[2 * j][0], p[2 * j][1]), ptx::pack_bf16x2(p[2 * j][2], p[2 * j][3]),
                           ptx::pack_bf16x2(p[2 * j + 1][0], p[2 * j + 1][1]),
                           ptx::pack_bf16x2(p[2 * j + 1][2], p[2 * j + 1][3])};
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t r[4];
      ptx::ldmatrix_x4_trans(r, row + j * 16 * SMEM_STRIDE + dp * 16);
      const uint32_t b0[2] = {r[0], r[1]};
      const uint32_t b1[2] = {r[2], r[3]};
      ptx::mma_m16n8k16_bf16_f32(o[2 * dp], a, b0);
      ptx::mma_m16n8k16_bf16_f32(o[2 * dp + 1], a, b1);
    }
  }
}

}  // namespace xstage::attention
