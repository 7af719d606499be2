#pragma once
// Launch of the fused MoE expert layer kernel (fused_layer_sm90.cuh), callable
// from host C++. Returns a cudaError_t as an int (cudaErrorInvalidValue for an
// unknown tile or a tensor map the driver rejects). Arguments are validated
// by the caller (src/runtime/moe/): hidden a multiple of 16 and inter of 8
// (what the grouped GEMMs take; no tile width need divide either), rows_cap
// >= 1, E_run >= 1, pointers 16-byte aligned.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "device/moe/fused_layer_params.hpp"

namespace xstage::moe {

// trace: the per-tile trace (a separately compiled kernel), or null.
int launch_fused_layer(const FusedLayerParams& p, int fused_tile, cudaStream_t stream,
                       const FusedTrace* trace = nullptr);
int fused_layer_block_m(int fused_tile);  // 0 for an unknown tile
// Loads the tile's kernel on the current device, as
// preload_moe_layer_comm_kernels does for the others.
int preload_fused_layer(int fused_tile);
inline constexpr int kFusedBlockN = 256;
// The workspace's int32 counters (FusedLayerParams::counters) for a pool of rows_cap rows.
inline int64_t fused_layer_counter_ints(int E_run, int64_t rows_cap) {
  return 4 + int64_t(E_run) + (rows_cap + kFusedCopyBlockRows - 1) / kFusedCopyBlockRows;
}
// Tiles of one GEMM at most (every expert's last m-block partial): the trace's capacity per GEMM.
inline int64_t fused_layer_max_tiles(int64_t rows_cap, int E_run, int block_m, int n) {
  return (rows_cap / block_m + E_run) * ((int64_t(n) + kFusedBlockN - 1) / kFusedBlockN);
}

}  // namespace xstage::moe
