// The fused Ulysses attention on the mma.sync kernel, and the dispatch between
// the two kernels.
#include "device/attention/attention_launch.hpp"
#include "device/ulysses/launch.hpp"
#include "device/ulysses/launch_paths.cuh"

namespace xstage::ulysses {

int launch_ulysses_attention(const attention::MainloopParams& p, const UlyssesStoreParams& ep,
                             const sched::OrderedSchedulerParams& sp, StorePath path, Completion completion,
                             int kernel, cudaStream_t stream) {
  using launch_detail::launch_d;
  if (kernel == attention::kKernelMmaSync) {
    switch (p.D) {
      case 64: return launch_d<64, false>(p, ep, sp, path, completion, stream);
      case 128: return launch_d<128, false>(p, ep, sp, path, completion, stream);
      default: return int(cudaErrorInvalidValue);
    }
  }
  if (kernel == attention::kKernelWgmmaPingpong) {
    switch (p.D) {
      case 64: return launch_ulysses_attention_wgmma_d64(p, ep, sp, path, completion, stream);
      case 128: return launch_ulysses_attention_wgmma_d128(p, ep, sp, path, completion, stream);
      default: return int(cudaErrorInvalidValue);
    }
  }
  return int(cudaErrorInvalidValue);
}

}  // namespace xstage::ulysses
