#pragma once
// Epilogue policies of the grouped GEMM: what a consumer warp does with its
// 16 rows x WG_TILE_N columns of fp32 accumulators (the wgmma D layout, see
// ptx/wgmma.cuh: thread (g, t) holds rows g and g + 8, columns 8 nb + 2t, +1).
//   static constexpr int kOutDiv   output columns = N / kOutDiv
//   store<NB>(params, acc, row, row_end, col0, lane)
//       row: the tile row of the warp's first row (absolute row of A / C),
//       rows >= row_end belong to the next expert (or are past the tensor) and
//       are never stored; col0: the output column of accumulator column 0.
// Stores go straight from registers: each quad of lanes writes 16 contiguous
// bytes of a row, so every 32-byte sector a warp touches is written in full
// by two consecutive n-blocks before it leaves L2.
#include <cstdint>

#include "device/moe/moe_params.hpp"
#include "device/ptx/math.cuh"

namespace xstage::moe {

// C = A B^T as bf16.
struct PlainStoreEpilogue {
  static constexpr int kOutDiv = 1;
  template <int NB>
  __device__ __forceinline__ static void store(const GroupedGemmParams& p, const float (&acc)[NB][4], int row,
                                               int row_end, int col0, int lane) {
    const int g = lane >> 2, t = lane & 3;
    const int n_out = p.N;
    uint16_t* c = static_cast<uint16_t*>(p.c);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row + g + 8 * h;
      if (r >= row_end) continue;
      uint16_t* crow = c + int64_t(r) * n_out + col0 + 2 * t;
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
        *reinterpret_cast<uint32_t*>(crow + 8 * nb) = ptx::pack_bf16x2(acc[nb][2 * h], acc[nb][2 * h + 1]);
    }
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
                                               int row_end, int col0, int lane) {
    static_assert(NB % 2 == 0, "gate and up n-blocks come in pairs");
    const int g = lane >> 2, t = lane & 3;
    const int n_out = p.N / 2;
    uint16_t* c = static_cast<uint16_t*>(p.c);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row + g + 8 * h;
      if (r >= row_end) continue;
      const float w = p.row_weight != nullptr ? __ldg(p.row_weight + r) : 1.f;
      uint16_t* crow = c + int64_t(r) * n_out + col0 + 2 * t;
#pragma unroll
      for (int j = 0; j < NB / 2; ++j) {
        const float v0 = silu_mul(acc[2 * j][2 * h], acc[2 * j + 1][2 * h]) * w;
        const float v1 = silu_mul(acc[2 * j][2 * h + 1], acc[2 * j + 1][2 * h + 1]) * w;
        *reinterpret_cast<uint32_t*>(crow + 8 * j) = ptx::pack_bf16x2(v0, v1);
      }
    }
  }
};

}  // namespace xstage::moe
