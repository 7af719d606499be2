#pragma once
// Global -> shared tile loads with cp.async (16 bytes a thread, zero-filled
// past the end of the sequence). Replaceable by TMA on mbarriers later: the
// mainloop only relies on "tile j is in buffer j % STAGES after the wait".
#include <cstdint>

#include "device/ptx/cp_async.cuh"

namespace xstage::attention {

// Issues the copies of rows [row0, row0 + ROWS) of one (batch, head) slice into
// smem (row-major, SMEM_STRIDE elements a row). Rows >= rows_total are zero-filled
// (nothing is read), so masked keys see finite zeros and padded queries give
// finite scores. `base` points at element (b, s = 0, h, d = 0); `row_stride` is
// the S stride in elements. Does not commit the group.
template <int ROWS, int D, int SMEM_STRIDE, int THREADS>
__device__ __forceinline__ void load_tile_async(uint16_t* smem, const uint16_t* base, int64_t row_stride, int row0,
                                                int rows_total, int tid) {
  constexpr int CHUNKS_PER_ROW = D / 8;  // 16-byte chunks
  constexpr int CHUNKS = ROWS * CHUNKS_PER_ROW;
  static_assert(CHUNKS % THREADS == 0, "load_tile_async: chunks must split evenly over the threads");
#pragma unroll
  for (int i = 0; i < CHUNKS / THREADS; ++i) {
    const int chunk = tid + i * THREADS;
    const int r = chunk / CHUNKS_PER_ROW;
    const int c = chunk % CHUNKS_PER_ROW;
    const int row = row0 + r;
    const bool valid = row < rows_total;
    const uint16_t* src = valid ? base + int64_t(row) * row_stride + c * 8 : base;
    ptx::cp_async_cg_16_zfill(smem + r * SMEM_STRIDE + c * 8, src, valid);
  }
}

}  // namespace xstage::attention
