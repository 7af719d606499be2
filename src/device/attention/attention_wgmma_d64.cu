// The wgmma attention kernel at D = 64 with the local store and the linear
// tile order, one instantiation per GEMM/softmax schedule (one file per head
// dim so the two build in parallel).
#include "device/attention/attention_launch.hpp"
#include "device/attention/launch_attention_wgmma.cuh"
#include "device/sched/linear.cuh"

namespace xstage::attention {

int launch_attention_wgmma_local_d64(const MainloopParams& p, const LocalStoreParams& ep, int kernel,
                                      cudaStream_t stream) {
  switch (kernel) {
    case kKernelWgmmaBasic:
      return launch_attention_wgmma_kernel<64, LocalStoreEpilogue, sched::LinearTileScheduler, kWgmmaBasic>(p, ep, {}, stream);
    case kKernelWgmmaOverlap:
      return launch_attention_wgmma_kernel<64, LocalStoreEpilogue, sched::LinearTileScheduler, kWgmmaOverlap>(p, ep, {}, stream);
    case kKernelWgmmaPingpong:
      return launch_attention_wgmma_kernel<64, LocalStoreEpilogue, sched::LinearTileScheduler, kWgmmaPingpong>(p, ep, {}, stream);
    case kKernelWgmmaPingpongN192:
      return launch_attention_wgmma_kernel<64, LocalStoreEpilogue, sched::LinearTileScheduler, kWgmmaPingpong, 192>(p, ep, {},
                                                                                                          stream);
    case kKernelWgmmaM192:
      return launch_attention_wgmma_kernel<64, LocalStoreEpilogue, sched::LinearTileScheduler, kWgmmaPingpong, 128, 3>(
          p, ep, {}, stream);
    case kKernelWgmmaM192Overlap:
      return launch_attention_wgmma_kernel<64, LocalStoreEpilogue, sched::LinearTileScheduler, kWgmmaOverlap, 128, 3>(
          p, ep, {}, stream);
    default: return int(cudaErrorInvalidValue);
  }
}

int attention_wgmma_pingpong_ctas_per_sm_d64() {
  return attention_wgmma_ctas_per_sm<64, LocalStoreEpilogue, sched::LinearTileScheduler>();
}

}  // namespace xstage::attention
