#pragma once
// Epilogue policies of the grouped GEMM: what a consumer warp does with its
// 16 rows x WG_TILE_N columns of fp32 accumulators (the wgmma D layout, see
// ptx/wgmma.cuh: thread (g, t) holds rows g and g + 8, columns 8 nb + 2t, +1).
//   static constexpr int kOutDiv   output columns = N / kOutDiv
//   store<NB>(params, acc, row, row_end, col0, lane, stage)
//       row: the tile row of the warp's first row (absolute row of A / C),
//       rows >= row_end belong to the next expert (or are past the tensor) and
//       are never stored; col0: the output column of accumulator column 0;
//       stage: the warp's kStageWarpElems bf16 of shared memory.
// Stores go through a small warp-private staging area in shared memory
// (store_staged): a warp writes 64 output columns of its 16 rows there, then
// each lane stores 16 contiguous bytes, whole 128-byte row segments a
// warp instruction. Straight from registers, each lane would store 4 bytes
// and a warp instruction would touch 8 rows; the LSU and L2 transactions of
// that epilogue stood exposed between two tiles' mainloops (docs/perf-log.md).
#include <cstdint>

#include "device/moe/moe_params.hpp"
#include "device/ptx/math.cuh"

namespace xstage::moe {

// Staging rows per warp: 16 rows of 64 bf16 columns, padded to 72 so that
// the accumulator writes (lane (g, t) at row g, column 2t of each 8-column
// block) fall in 32 different banks: 144-byte rows put row g at bank 4g.
inline constexpr int kStageStride = 72;
inline constexpr int kStageWarpElems = 16 * kStageStride;

// out(ob, v): the packed bf16x2 values of output block ob (8 columns) for rows
// g (v[0]) and g + 8 (v[1]) of this lane. OB output blocks, a multiple of 8.
template <int OB, class Out>
__device__ __forceinline__ void store_staged(uint16_t* stage, uint16_t* c, int n_out, int row, int row_end, int col0,
                                             int lane, Out&& out) {
  static_assert(OB % 8 == 0, "64-column chunks");
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int ch = 0; ch < OB / 8; ++ch) {
#pragma unroll
    for (int b = 0; b < 8; ++b) {
      uint32_t v[2];
      out(ch * 8 + b, v);
      *reinterpret_cast<uint32_t*>(stage + g * kStageStride + b * 8 + 2 * t) = v[0];
      *reinterpret_cast<uint32_t*>(stage + (g + 8) * kStageStride + b * 8 + 2 * t) = v[1];
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = i * 4 + (lane >> 3), piece = lane & 7;
      if (row + r < row_end)
        *reinterpret_cast<uint4*>(c + int64_t(row + r) * n_out + col0 + ch * 64 + piece * 8) =
            *reinterpret_cast<const uint4*>(stage + r * kStageStride + piece * 8);
    }
    __syncwarp();  // the next chunk overwrites the rows just read
  }
}

// C = A B^T as bf16.
struct PlainStoreEpilogue {
  static constexpr int kOutDiv = 1;
  template <int NB>
  __device__ __forceinline__ static void store(const GroupedGemmParams& p, const float (&acc)[NB][4], int row,
                                               int row_end, int col0, int lane, uint16_t* stage) {
    store_staged<NB>(stage, static_cast<uint16_t*>(p.c), p.N, row, row_end, col0, lane, [&](int ob, uint32_t* v) {
      v[0] = ptx::pack_bf16x2(acc[ob][0], acc[ob][1]);
      v[1] = ptx::pack_bf16x2(acc[ob][2], acc[ob][3]);
    });
  }
};

// h = silu(gate) * up (* the row's routing weight) as bf16. B = W13 with its
// gate and up rows interleaved in groups of 8 (rows 16j .. 16j+7 are gate
// rows 8j .. 8j+7, rows 16j+8 .. 16j+15 the matching up rows: w13_interleave
// in the runtime), so n-blocks 2j and 2j+1 of the accumulators hold the gate
// and up values of the same 8 output columns, in the same registers of the
// same thread: the SwiGLU needs no data exchange.
struct SwigluStoreEpilogue {
  static constexpr int kOutDiv = 2;
  __device__ __forceinline__ static float silu_mul(float gate, float up) {
    return gate / (1.f + __expf(-gate)) * up;
  }
  template <int NB>
  __device__ __forceinline__ static void store(const GroupedGemmParams& p, const float (&acc)[NB][4], int row,
                                               int row_end, int col0, int lane, uint16_t* stage) {
    static_assert(NB % 2 == 0, "gate and up n-blocks come in pairs");
    const int g = lane >> 2;
    float w[2] = {1.f, 1.f};
    if (p.row_weight != nullptr) {  // rows past the expert's end read a valid row of A's range, or none
      if (row + g < row_end) w[0] = __ldg(p.row_weight + row + g);
      if (row + g + 8 < row_end) w[1] = __ldg(p.row_weight + row + g + 8);
    }
    store_staged<NB / 2>(stage, static_cast<uint16_t*>(p.c), p.N / 2, row, row_end, col0, lane,
                         [&](int j, uint32_t* v) {
#pragma unroll
                           for (int h = 0; h < 2; ++h)
                             v[h] = ptx::pack_bf16x2(silu_mul(acc[2 * j][2 * h], acc[2 * j + 1][2 * h]) * w[h],
                                                     silu_mul(acc[2 * j][2 * h + 1], acc[2 * j + 1][2 * h + 1]) * w[h]);
                         });
  }
};

}  // namespace xstage::moe
