#include "device/attention/attention_launch.hpp"
#include "device/attention/config_wgmma.cuh"
#include "device/attention/launch_attention.cuh"
#include "device/sched/linear.cuh"

namespace xstage::attention {

// The wgmma kernel with the ping-pong schedule (128-key tiles
// at D=128, 192-key tiles at D=64): correct on every test shape, 1.6-2.8x the
// mma.sync kernel (docs/perf-log.md, "Attention forward, wgmma kernel").
// D = 64: three consumer warpgroups without ping-pong, the fastest measured
// (docs/perf-log.md, v4); D = 128: two with ping-pong.
int attention_fwd_default_kernel(int D) { return D == 64 ? kKernelWgmmaM192Overlap : kKernelWgmmaPingpong; }

int launch_attention_fwd_local_kernel(const MainloopParams& p, const LocalStoreParams& ep, int kernel,
                                      cudaStream_t stream) {
  if (kernel == kKernelAuto) kernel = attention_fwd_default_kernel(p.D);
  if (kernel == kKernelMmaSync) {
    switch (p.D) {
      case 64: return launch_attention_kernel<64, LocalStoreEpilogue, sched::LinearTileScheduler>(p, ep, {}, stream);
      case 128: return launch_attention_kernel<128, LocalStoreEpilogue, sched::LinearTileScheduler>(p, ep, {}, stream);
      default: return int(cudaErrorInvalidValue);
    }
  }
  if (kernel == kKernelWgmmaBasic || kernel == kKernelWgmmaOverlap || kernel == kKernelWgmmaPingpong ||
      kernel == kKernelWgmmaPingpongN192 || kernel == kKernelWgmmaM192 || kernel == kKernelWgmmaM192Overlap) {
    switch (p.D) {
      case 64: return launch_attention_wgmma_local_d64(p, ep, kernel, stream);
      case 128: return launch_attention_wgmma_local_d128(p, ep, kernel, stream);
      default: return int(cudaErrorInvalidValue);
    }
  }
  return int(cudaErrorInvalidValue);
}

int launch_attention_fwd_local(const MainloopParams& p, const LocalStoreParams& ep, cudaStream_t stream) {
  return launch_attention_fwd_local_kernel(p, ep, kKernelAuto, stream);
}

KernelShape attention_fwd_kernel_shape_of(int D, int kernel) {
  if (D != 64 && D != 128) return {};
  if (kernel == kKernelAuto) kernel = attention_fwd_default_kernel(D);
  auto shape = [](auto cfg) {
    using Cfg = decltype(cfg);
    return KernelShape{Cfg::BLOCK_M, Cfg::BLOCK_N, Cfg::THREADS, Cfg::SMEM_BYTES};
  };
  if (kernel == kKernelMmaSync) return D == 64 ? shape(Sm90AttnFwdConfig<64>{}) : shape(Sm90AttnFwdConfig<128>{});
  if (kernel == kKernelWgmmaBasic || kernel == kKernelWgmmaOverlap || kernel == kKernelWgmmaPingpong)
    return D == 64 ? shape(Sm90WgmmaAttnConfig<64>{}) : shape(Sm90WgmmaAttnConfig<128>{});
  if (kernel == kKernelWgmmaPingpongN192 && D == 64) return shape(Sm90WgmmaAttnConfig<64, 192>{});
  if ((kernel == kKernelWgmmaM192 || kernel == kKernelWgmmaM192Overlap) && D == 64)
    return shape(Sm90WgmmaAttnConfig<64, 128, 3>{});
  return {};
}

KernelShape attention_fwd_kernel_shape(int D) { return attention_fwd_kernel_shape_of(D, kKernelAuto); }

namespace {
template <int D>
int ctas_per_sm() {
  using Cfg = Sm90AttnFwdConfig<D>;
  auto* fn = sm90_bf16_attention_fwd<D, LocalStoreEpilogue, sched::LinearTileScheduler>;
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

int attention_fwd_ctas_per_sm_of(int D, int kernel) {
  if (kernel == kKernelMmaSync) return attention_fwd_ctas_per_sm(D);
  if (kernel != kKernelWgmmaPingpong) return 0;
  if (D == 64) return attention_wgmma_pingpong_ctas_per_sm_d64();
  if (D == 128) return attention_wgmma_pingpong_ctas_per_sm_d128();
  return 0;
}

}  // namespace xstage::attention
