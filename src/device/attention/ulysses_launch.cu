// The fused Ulysses attention on the mma.sync kernel, the dispatch between the
// two kernels, and the receiver wait.
#include "device/attention/attention_launch.hpp"
#include "device/attention/ulysses_launch.hpp"
#include "device/attention/ulysses_launch_paths.cuh"
#include "device/attention/ulysses_wait.cuh"

namespace xstage::attention {

int launch_ulysses_attention(const MainloopParams& p, const UlyssesStoreParams& ep,
                             const OrderedSchedulerParams& sp, StorePath path, Completion completion, int kernel,
                             cudaStream_t stream) {
  using ulysses_launch_detail::launch_d;
  if (kernel == kKernelMmaSync) {
    switch (p.D) {
      case 64: return launch_d<64, false>(p, ep, sp, path, completion, stream);
      case 128: return launch_d<128, false>(p, ep, sp, path, completion, stream);
      default: return int(cudaErrorInvalidValue);
    }
  }
  if (kernel == kKernelWgmmaPingpong) {
    switch (p.D) {
      case 64: return launch_ulysses_attention_wgmma_d64(p, ep, sp, path, completion, stream);
      case 128: return launch_ulysses_attention_wgmma_d128(p, ep, sp, path, completion, stream);
      default: return int(cudaErrorInvalidValue);
    }
  }
  return int(cudaErrorInvalidValue);
}

int launch_ulysses_wait(const UlyssesStoreParams& ep, int rank_first, int n_ranks, int block_m,
                        unsigned long long timeout_ns, cudaStream_t stream) {
  if (n_ranks < 1 || block_m < 1) return int(cudaErrorInvalidValue);
  sm90_u64_ulysses_wait_flags<<<dim3(8, unsigned(n_ranks)), 256, 0, stream>>>(ep, rank_first, block_m, timeout_ns);
  return int(cudaGetLastError());
}

}  // namespace xstage::attention
