#pragma once
// Output rows staged in shared memory, the hand-over point between a
// kernel's accumulators and its epilogue policy (local stores, or the
// remote-store layer's senders). A warp's 16 rows of an mma-layout fp32
// accumulator tile are written as bf16 rows, then read back in 16-byte
// chunks spread over the lanes.
#include <cstdint>

#include "device/ptx/math.cuh"

namespace xstage::epilogue {

// o: this warp's normalised fp32 accumulators (C layout, D/8 blocks of 8
// columns). Writes rows g and g + 8 of the warp into srows (SMEM_STRIDE
// elements a row). The caller syncs the warp before reading them back.
template <int D, int SMEM_STRIDE>
__device__ __forceinline__ void stage_o_rows(uint16_t* srows, const float (&o)[D / 8][4], int lane) {
  const int g = lane >> 2, c0 = 2 * (lane & 3);
#pragma unroll
  for (int db = 0; db < D / 8; ++db) {
    *reinterpret_cast<uint32_t*>(srows + g * SMEM_STRIDE + db * 8 + c0) = ptx::pack_bf16x2(o[db][0], o[db][1]);
    *reinterpret_cast<uint32_t*>(srows + (g + 8) * SMEM_STRIDE + db * 8 + c0) =
        ptx::pack_bf16x2(o[db][2], o[db][3]);
  }
}

// Hands every 16-byte chunk of the warp's 16 staged rows (rows < S_q only)
// to fn(row, column, chunk), chunks spread over the 32 lanes so that
// consecutive lanes touch consecutive 16 bytes of a row (coalesced).
template <int D, int SMEM_STRIDE, class Fn>
__device__ __forceinline__ void for_each_staged_chunk(const uint16_t* srows, int row0, int S_q, int lane, Fn&& fn) {
  constexpr int CHUNKS_PER_ROW = D / 8;  // 16-byte chunks
  constexpr int CHUNKS = 16 * CHUNKS_PER_ROW;
  static_assert(CHUNKS % 32 == 0, "store_rows: the warp's chunks must split evenly over 32 lanes");
#pragma unroll
  for (int i = 0; i < CHUNKS / 32; ++i) {
    const int chunk = lane + 32 * i;
    const int r = chunk / CHUNKS_PER_ROW, col = (chunk % CHUNKS_PER_ROW) * 8;
    const int row = row0 + r;
    if (row < S_q) fn(row, col, *reinterpret_cast<const uint4*>(srows + r * SMEM_STRIDE + col));
  }
}

}  // namespace xstage::epilogue
