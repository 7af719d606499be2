#include "device/attention/attention_launch.hpp"
#include "device/attention/sm90_attention_fwd.cuh"

namespace xstage::attention {

namespace {

template <int D, class Epilogue, class Scheduler>
int launch(const MainloopParams& p, const typename Epilogue::Params& ep, cudaStream_t stream) {
  using Cfg = Sm90AttnFwdConfig<D>;
  auto* fn = sm90_bf16_attention_fwd<D, Epilogue, Scheduler>;
  // Every launch sets it (cheap); the first call per kernel is what matters.
  cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Cfg::SMEM_BYTES));
  if (e != cudaSuccess) return int(e);
  int device = 0, sms = 0;
  e = cudaGetDevice(&device);
  if (e != cudaSuccess) return int(e);
  e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return int(e);
  const Scheduler sched(p.S_q, p.H, p.B, Cfg::BLOCK_M);
  const int64_t grid = Scheduler::grid_size(sched.num_tiles(), sms, Cfg::MIN_BLOCKS);
  if (grid < 1 || grid > 0x7fffffff) return int(cudaErrorInvalidConfiguration);
  fn<<<dim3(unsigned(grid)), dim3(Cfg::THREADS), Cfg::SMEM_BYTES, stream>>>(p, ep);
  return int(cudaGetLastError());
}

}  // namespace

int launch_attention_fwd_local(const MainloopParams& p, const LocalStoreParams& ep, cudaStream_t stream) {
  switch (p.D) {
    case 64: return launch<64, LocalStoreEpilogue, LinearTileScheduler>(p, ep, stream);
    case 128: return launch<128, LocalStoreEpilogue, LinearTileScheduler>(p, ep, stream);
    default: return int(cudaErrorInvalidValue);
  }
}

KernelShape attention_fwd_kernel_shape(int D) {
  auto shape = [](auto cfg) {
    using Cfg = decltype(cfg);
    return KernelShape{Cfg::BLOCK_M, Cfg::BLOCK_N, Cfg::THREADS, Cfg::SMEM_BYTES};
  };
  if (D == 64) return shape(Sm90AttnFwdConfig<64>{});
  if (D == 128) return shape(Sm90AttnFwdConfig<128>{});
  return {};
}

}  // namespace xstage::attention
