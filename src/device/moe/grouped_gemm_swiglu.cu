// The grouped GEMM with the SwiGLU epilogue (MoE L1), one instantiation per tile shape and output store.
#include "device/moe/grouped_gemm_launch.hpp"
#include "device/moe/launch_grouped_gemm.cuh"

namespace xstage::moe {

int launch_grouped_gemm_swiglu(const GroupedGemmParams& p, int tile, int out_store, cudaStream_t stream) {
  return launch_grouped_gemm_tile<gemm::SwigluEpilogue>(p, tile, out_store, stream);
}

TileShape grouped_gemm_tile_shape(int tile) {
  switch (tile) {
    case kTileM128N256: return {128, 256};
    case kTileM64N256: return {64, 256};
    case kTileM128N128: return {128, 128};
    case kTileM64N80: return {64, 80};
    case kTileM128N128Pingpong: return {128, 128};
    default: return {};
  }
}

}  // namespace xstage::moe
