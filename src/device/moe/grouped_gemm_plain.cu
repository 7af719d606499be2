// The grouped GEMM with the plain local store (MoE L2), one instantiation per tile shape and output store.
#include "device/moe/grouped_gemm_launch.hpp"
#include "device/moe/launch_grouped_gemm.cuh"

namespace xstage::moe {

int launch_grouped_gemm_plain(const GroupedGemmParams& p, int tile, int out_store, cudaStream_t stream) {
  return launch_grouped_gemm_tile<gemm::PlainEpilogue>(p, tile, out_store, stream);
}

}  // namespace xstage::moe
