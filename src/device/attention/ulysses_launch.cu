#include "device/attention/epilogue_ulysses.cuh"
#include "device/attention/epilogue_ulysses_paced.cuh"
#include "device/attention/launch_attention.cuh"
#include "device/attention/tile_scheduler_ordered.cuh"
#include "device/attention/ulysses_launch.hpp"
#include "device/attention/ulysses_wait.cuh"

namespace xstage::attention {

namespace {
template <int D, StorePath kPath>
int launch_path(const MainloopParams& p, const UlyssesStoreParams& ep, const OrderedSchedulerParams& sp,
                Completion completion, cudaStream_t stream) {
  using Sched = OrderedTileScheduler;
  switch (completion) {
    case Completion::lagged:
      return launch_attention_kernel<D, UlyssesStoreEpilogue<kPath, Completion::lagged>, Sched>(p, ep, sp, stream);
    case Completion::eager:
      return launch_attention_kernel<D, UlyssesStoreEpilogue<kPath, Completion::eager>, Sched>(p, ep, sp, stream);
    case Completion::coupled:
      return launch_attention_kernel<D, UlyssesStoreEpilogue<kPath, Completion::coupled>, Sched>(p, ep, sp, stream);
    case Completion::at_exit:
      return launch_attention_kernel<D, UlyssesStoreEpilogue<kPath, Completion::at_exit>, Sched>(p, ep, sp, stream);
  }
  return int(cudaErrorInvalidValue);
}

template <int D>
int launch_d(const MainloopParams& p, const UlyssesStoreParams& ep, const OrderedSchedulerParams& sp,
             StorePath path, Completion completion, cudaStream_t stream) {
  switch (path) {
    case StorePath::vector16: return launch_path<D, StorePath::vector16>(p, ep, sp, completion, stream);
    case StorePath::vector16_wt: return launch_path<D, StorePath::vector16_wt>(p, ep, sp, completion, stream);
    case StorePath::vector16_cs: return launch_path<D, StorePath::vector16_cs>(p, ep, sp, completion, stream);
    case StorePath::bulk: return launch_path<D, StorePath::bulk>(p, ep, sp, completion, stream);
    case StorePath::paced:
      // Its own completion (lagged, once every slice is sent); `completion` must say lagged.
      if (completion != Completion::lagged) return int(cudaErrorInvalidValue);
      return launch_attention_kernel<D, UlyssesPacedEpilogue, OrderedTileScheduler>(p, ep, sp, stream);
  }
  return int(cudaErrorInvalidValue);
}
}  // namespace

int launch_ulysses_attention(const MainloopParams& p, const UlyssesStoreParams& ep,
                             const OrderedSchedulerParams& sp, StorePath path, Completion completion,
                             cudaStream_t stream) {
  switch (p.D) {
    case 64: return launch_d<64>(p, ep, sp, path, completion, stream);
    case 128: return launch_d<128>(p, ep, sp, path, completion, stream);
    default: return int(cudaErrorInvalidValue);
  }
}

int launch_ulysses_wait(const UlyssesStoreParams& ep, int rank_first, int n_ranks, int block_m,
                        unsigned long long timeout_ns, cudaStream_t stream) {
  if (n_ranks < 1 || block_m < 1) return int(cudaErrorInvalidValue);
  sm90_u64_ulysses_wait_flags<<<dim3(8, unsigned(n_ranks)), 256, 0, stream>>>(ep, rank_first, block_m, timeout_ns);
  return int(cudaGetLastError());
}

}  // namespace xstage::attention
