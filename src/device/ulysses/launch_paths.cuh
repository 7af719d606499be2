#pragma once
// The fused Ulysses attention's instantiations, for either attention kernel:
// store path x completion -> one launch of the attention kernel with a
// remote-store epilogue over the Ulysses destination map. Included by one
// .cu file per kernel and head dim (launch*.cu), so that no file compiles
// them all.
#include "device/attention/launch_attention.cuh"
#include "device/attention/launch_attention_wgmma.cuh"
#include "device/remote/epilogue_paced.cuh"
#include "device/remote/epilogue_producer_paced.cuh"
#include "device/remote/epilogue_store.cuh"
#include "device/sched/ordered.cuh"
#include "device/ulysses/destination.cuh"
#include "device/ulysses/params.hpp"
#include "xstage/comm/remote_store.hpp"

namespace xstage::ulysses::launch_detail {

using attention::MainloopParams;
using sched::OrderedSchedulerParams;
using Dest = UlyssesDestination;

// kWgmma: sm90_bf16_attention_fwd_wgmma (ping-pong, 128-key tiles, for every
// head dim: the attention-only floor of the Ulysses runs uses the same one),
// else sm90_bf16_attention_fwd (mma.sync).
template <int D, bool kWgmma, class Epilogue>
int launch_epilogue(const MainloopParams& p, const UlyssesStoreParams& ep, const OrderedSchedulerParams& sp,
                    cudaStream_t stream) {
  using Sched = sched::OrderedTileScheduler;
  if constexpr (kWgmma)
    return attention::launch_attention_wgmma_kernel<D, Epilogue, Sched, attention::kWgmmaPingpong, 128>(p, ep, sp,
                                                                                                        stream);
  else
    return attention::launch_attention_kernel<D, Epilogue, Sched>(p, ep, sp, stream);
}

template <int D, bool kWgmma, StorePath kPath>
int launch_path(const MainloopParams& p, const UlyssesStoreParams& ep, const OrderedSchedulerParams& sp,
                Completion completion, cudaStream_t stream) {
  switch (completion) {
    case Completion::lagged:
      return launch_epilogue<D, kWgmma, remote::RemoteStoreEpilogue<Dest, kPath, Completion::lagged>>(p, ep, sp,
                                                                                                      stream);
    case Completion::eager:
      return launch_epilogue<D, kWgmma, remote::RemoteStoreEpilogue<Dest, kPath, Completion::eager>>(p, ep, sp,
                                                                                                     stream);
    case Completion::coupled:
      return launch_epilogue<D, kWgmma, remote::RemoteStoreEpilogue<Dest, kPath, Completion::coupled>>(p, ep, sp,
                                                                                                       stream);
    case Completion::at_exit:
      return launch_epilogue<D, kWgmma, remote::RemoteStoreEpilogue<Dest, kPath, Completion::at_exit>>(p, ep, sp,
                                                                                                       stream);
  }
  return int(cudaErrorInvalidValue);
}

// The write-through and streaming variants of the 16-byte stores run on the
// mma.sync kernel only (perf-log f2 measured them there); the wgmma kernel is
// not instantiated with them (cudaErrorNotSupported).
template <int D, bool kWgmma>
int launch_d(const MainloopParams& p, const UlyssesStoreParams& ep, const OrderedSchedulerParams& sp, StorePath path,
             Completion completion, cudaStream_t stream) {
  switch (path) {
    case StorePath::vector16: return launch_path<D, kWgmma, StorePath::vector16>(p, ep, sp, completion, stream);
    case StorePath::vector16_wt:
    case StorePath::vector16_cs:
      if constexpr (kWgmma) {
        return int(cudaErrorNotSupported);
      } else {
        return path == StorePath::vector16_wt
                   ? launch_path<D, kWgmma, StorePath::vector16_wt>(p, ep, sp, completion, stream)
                   : launch_path<D, kWgmma, StorePath::vector16_cs>(p, ep, sp, completion, stream);
      }
    case StorePath::bulk: return launch_path<D, kWgmma, StorePath::bulk>(p, ep, sp, completion, stream);
    case StorePath::paced:
      // Flags once every slice of a tile is sent (lagged), or at exit.
      if (completion == Completion::lagged)
        return launch_epilogue<D, kWgmma, remote::RemotePacedEpilogue<Dest, Completion::lagged>>(p, ep, sp, stream);
      if (completion == Completion::at_exit)
        return launch_epilogue<D, kWgmma, remote::RemotePacedEpilogue<Dest, Completion::at_exit>>(p, ep, sp, stream);
      return int(cudaErrorInvalidValue);
    case StorePath::paced_bulk:
    case StorePath::paced_warp:
      // Sent by the wgmma kernel's producer warpgroup (the mma kernel has
      // none); flags at exit only.
      if constexpr (kWgmma) {
        if (completion != Completion::at_exit) return int(cudaErrorInvalidValue);
        return path == StorePath::paced_bulk
                   ? launch_epilogue<D, kWgmma, remote::RemoteProducerPacedEpilogue<Dest, true>>(p, ep, sp, stream)
                   : launch_epilogue<D, kWgmma, remote::RemoteProducerPacedEpilogue<Dest, false>>(p, ep, sp, stream);
      } else {
        return int(cudaErrorNotSupported);
      }
  }
  return int(cudaErrorInvalidValue);
}

}  // namespace xstage::ulysses::launch_detail
