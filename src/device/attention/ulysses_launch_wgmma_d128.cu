// The fused Ulysses attention on the wgmma kernel, head dim 128 (its own file:
// the instantiations compile in parallel with the others).
#include "device/attention/ulysses_launch.hpp"
#include "device/attention/ulysses_launch_paths.cuh"

namespace xstage::attention {

int launch_ulysses_attention_wgmma_d128(const MainloopParams& p, const UlyssesStoreParams& ep,
                                       const OrderedSchedulerParams& sp, StorePath path, Completion completion,
                                       cudaStream_t stream) {
  return ulysses_launch_detail::launch_d<128, true>(p, ep, sp, path, completion, stream);
}

}  // namespace xstage::attention
