#pragma once
// Launches of the grouped (MoE expert) GEMM, callable from host C++. Each
// returns a cudaError_t as an int (0 on success); cudaErrorInvalidValue for an
// unknown tile or output store (OutStoreId, moe_params.hpp). Arguments are validated by the caller (src/runtime/moe/).
#include <cuda_runtime_api.h>

#include "device/moe/moe_params.hpp"

namespace xstage::moe {

// C = SwiGLU(A W13^T) (times the row weight when p.row_weight is set), W13 interleaved (gemm/epilogue_values.cuh).
int launch_grouped_gemm_swiglu(const GroupedGemmParams& p, int tile, int out_store, cudaStream_t stream);
// C = A B^T.
int launch_grouped_gemm_plain(const GroupedGemmParams& p, int tile, int out_store, cudaStream_t stream);

// BLOCK_M, BLOCK_N of a tile id (0, 0 for an unknown one).
struct TileShape {
  int block_m = 0, block_n = 0;
};
TileShape grouped_gemm_tile_shape(int tile);

}  // namespace xstage::moe
