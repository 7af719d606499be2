#include "device/attention/attention_launch.hpp"
#include "device/attention/launch_attention.cuh"

namespace xstage::attention {

int launch_attention_fwd_local(const MainloopParams& p, const LocalStoreParams& ep, cudaStream_t stream) {
  switch (p.D) {
    case 64: return launch_attention_kernel<64, LocalStoreEpilogue, LinearTileScheduler>(p, ep, {}, stream);
    case 128: return launch_attention_kernel<128, LocalStoreEpilogue, LinearTileScheduler>(p, ep, {}, stream);
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

namespace {
template <int D>
int ctas_per_sm() {
  using Cfg = Sm90AttnFwdConfig<D>;
  auto* fn = sm90_bf16_attention_fwd<D, LocalStoreEpilogue, LinearTileScheduler>;
  if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Cfg::SMEM_BYTES)) != cudaSuccess)
    return 0;
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, Cfg::THREADS, Cfg::SMEM_BYTES) != cudaSuccess) return 0;
  return n;
}
}  // namespace

int attention_fwd_ctas_per_sm(int D) {
  if (D == 64) return ctas_per_sm<64>();
  if (D == 128) return ctas_per_sm<128>();
  return 0;
}

}  // namespace xstage::attention
