// The fused Ulysses attention on the wgmma kernel, head dim 64 (its own file:
// the instantiations compile in parallel with the others).
#include "device/ulysses/launch.hpp"
#include "device/ulysses/launch_paths.cuh"

namespace xstage::ulysses {

int launch_ulysses_attention_wgmma_d64(const attention::MainloopParams& p, const UlyssesStoreParams& ep,
                                       const sched::OrderedSchedulerParams& sp, StorePath path,
                                       Completion completion, cudaStream_t stream) {
  return launch_detail::launch_d<64, true>(p, ep, sp, path, completion, stream);
}

}  // namespace xstage::ulysses
