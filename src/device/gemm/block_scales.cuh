#pragma once
// What the GEMM mainloop does after each k-block's wgmmas (mainloop_sm90.cuh,
// its `Promote` parameter):
//   NoPromotion   nothing: the products accumulate in the accumulators across
//                 k-blocks (bf16; FP8 without scales).
//   BlockScales   FP8 with block scales (the recipe DeepSeek-V3 trains and
//                 serves with): A has a scale per (row, 128 k), B one per
//                 (128 rows of B, that is 128 output columns, 128 k). A
//                 k-block of the FP8 mainloop (kBlockK = 128) is exactly one
//                 scale block, so its wgmmas go into a temporary (scale_d = 0
//                 at its first), which is then added to the accumulators
//                 times the two scales: acc += tmp * sa[row] * sb[col / 128].
// The scales are read from global memory (L2-resident: a few floats per
// k-block and thread). Loading them with the stage, by TMA, as the FP8
// GEMMs that ship do, would take them off the consumers' path; this is the
// first, checked form.
#include <climits>
#include <cstdint>

namespace xstage::gemm {

struct NoPromotion {
  static constexpr bool kPerBlock = false;
};

struct BlockScales {
  static constexpr bool kPerBlock = true;
  const float* a = nullptr;  // [rows of A][a_pitch]: A's scale of (row, k-block)
  const float* b = nullptr;  // [ceil(N / 128)][b_pitch]: B's scale of (128-column block, k-block)
  int a_pitch = 0, b_pitch = 0;
  int a_row0 = 0;  // the consumer warpgroup's first row of A
  int col0 = 0;    // its first output column (a row of B)
  // The scale arrays' extents: rows of A and 128-column blocks of B. A
  // partial tile's rows and columns past them (TMA's zero fill, never stored)
  // read the last row's or block's scale rather than past the arrays. Unset:
  // no clamp (whole tiles only).
  int a_rows = INT_MAX, b_blocks = INT_MAX;

  // acc (=, first k-block; else +=) tmp x scales, for the thread's fragment:
  // rows a_row0 + 16 w + g and + 8 (w: the warp in its warpgroup, g = lane /
  // 4), columns col0 + 8 nb + 2 t, + 1 (t = lane % 4), ptx/wgmma.cuh's layout.
  template <int WN>
  __device__ __forceinline__ void apply(float (&acc)[WN / 8][4], const float (&tmp)[WN / 8][4], int kb, bool first,
                                        int warp, int lane) const {
    const int row = a_row0 + 16 * warp + (lane >> 2);
    const int r0 = min(row, a_rows - 1), r1 = min(row + 8, a_rows - 1);
    const float sa0 = __ldg(a + int64_t(r0) * a_pitch + kb), sa1 = __ldg(a + int64_t(r1) * a_pitch + kb);
#pragma unroll
    for (int nb = 0; nb < WN / 8; ++nb) {
      // 128 columns a B scale: 16 n-blocks share one.
      const int blk = min((col0 + nb * 8) / 128, b_blocks - 1);
      const float sb = __ldg(b + int64_t(blk) * b_pitch + kb);
      const float s0 = sa0 * sb, s1 = sa1 * sb;
      if (first) {
        acc[nb][0] = tmp[nb][0] * s0, acc[nb][1] = tmp[nb][1] * s0;
        acc[nb][2] = tmp[nb][2] * s1, acc[nb][3] = tmp[nb][3] * s1;
      } else {
        acc[nb][0] += tmp[nb][0] * s0, acc[nb][1] += tmp[nb][1] * s0;
        acc[nb][2] += tmp[nb][2] * s1, acc[nb][3] += tmp[nb][3] * s1;
      }
    }
  }
};

}  // namespace xstage::gemm
