// The grouped GEMM with the plain local store (MoE L2), one instantiation per tile shape.
#include "device/moe/epilogue_store.cuh"
#include "device/moe/grouped_gemm_launch.hpp"
#include "device/moe/launch_grouped_gemm.cuh"

namespace xstage::moe {

int launch_grouped_gemm_plain(const GroupedGemmParams& p, int tile, cudaStream_t stream) {
  switch (tile) {
    case kTileM128N256: return launch_grouped_gemm<CfgM128N256, PlainStoreEpilogue>(p, stream);
    case kTileM64N256: return launch_grouped_gemm<CfgM64N256, PlainStoreEpilogue>(p, stream);
    case kTileM128N128: return launch_grouped_gemm<CfgM128N128, PlainStoreEpilogue>(p, stream);
    default: return int(cudaErrorInvalidValue);
  }
}

}  // namespace xstage::moe
