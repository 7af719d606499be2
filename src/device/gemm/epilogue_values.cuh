#pragma once
// Epilogue values of the GEMM kernels: what a consumer warp's 16 rows x
// WG_TILE_N columns of fp32 accumulators (the wgmma D layout, see
// ptx/wgmma.cuh: thread (g, t) holds rows g and g + 8, columns 8 nb + 2t, +1)
// become as bf16 output. A policy has
//   static constexpr int kOutDiv   output columns = N / kOutDiv
//   outputs<NB>(row_weight, acc, row, row_end, lane)
//       a functor out(ob, v) giving output block ob's (8 columns) packed
//       bf16x2 values for rows g (v[0]) and g + 8 (v[1]) of this lane;
//       row: the tile row of the warp's first row (absolute row of A / C),
//       rows >= row_end belong to the next expert (or are past the tensor);
//       row_weight: each row's routing weight, or null.
// Where the values go is the store's business (epilogue_stores.cuh: local
// rows, or another rank's through remote::RowTable).
#include <cstdint>

#include "device/ptx/math.cuh"

namespace xstage::gemm {

// C = A B^T as bf16.
struct PlainEpilogue {
  static constexpr int kOutDiv = 1;
  template <int NB>
  __device__ __forceinline__ static auto outputs(const float*, const float (&acc)[NB][4], int, int, int) {
    return [&acc](int ob, uint32_t* v) {
      v[0] = ptx::pack_bf16x2(acc[ob][0], acc[ob][1]);
      v[1] = ptx::pack_bf16x2(acc[ob][2], acc[ob][3]);
    };
  }
};

// h = silu(gate) * up (* the row's routing weight) as bf16. B = W13 with its
// gate and up rows interleaved in groups of 8 (rows 16j .. 16j+7 are gate
// rows 8j .. 8j+7, rows 16j+8 .. 16j+15 the matching up rows: w13_interleave
// in the runtime), so n-blocks 2j and 2j+1 of the accumulators hold the gate
// and up values of the same 8 output columns, in the same registers of the
// same thread: the SwiGLU needs no data exchange.
struct SwigluEpilogue {
  static constexpr int kOutDiv = 2;
  __device__ __forceinline__ static float silu_mul(float gate, float up) {
    return gate / (1.f + __expf(-gate)) * up;
  }
  template <int NB>
  __device__ __forceinline__ static auto outputs(const float* row_weight, const float (&acc)[NB][4], int row,
                                                 int row_end, int lane) {
    static_assert(NB % 2 == 0, "gate and up n-blocks come in pairs");
    const int g = lane >> 2;
    float w0 = 1.f, w1 = 1.f;
    if (row_weight != nullptr) {  // rows past the expert's end read a valid row of A's range, or none
      if (row + g < row_end) w0 = __ldg(row_weight + row + g);
      if (row + g + 8 < row_end) w1 = __ldg(row_weight + row + g + 8);
    }
    return [&acc, w0, w1](int j, uint32_t* v) {
      v[0] = ptx::pack_bf16x2(silu_mul(acc[2 * j][0], acc[2 * j + 1][0]) * w0,
                              silu_mul(acc[2 * j][1], acc[2 * j + 1][1]) * w0);
      v[1] = ptx::pack_bf16x2(silu_mul(acc[2 * j][2], acc[2 * j + 1][2]) * w1,
                              silu_mul(acc[2 * j][3], acc[2 * j + 1][3]) * w1);
    };
  }
};

}  // namespace xstage::gemm
