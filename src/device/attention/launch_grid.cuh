#pragma once
// What every attention launch does before the launch itself: raise the
// kernel's dynamic shared-memory limit (every launch sets it: cheap, and the
// first call per kernel and device is what matters), then size the grid with
// the tile scheduler on the current device's SMs.
#include <cuda_runtime.h>

#include <cstdint>

#include "device/attention/attention_params.hpp"

namespace xstage::attention {

// Returns a cudaError_t as int; *grid is set on success.
template <class Scheduler, class Kernel>
int attention_grid(Kernel* fn, size_t smem_bytes, const MainloopParams& p, const typename Scheduler::Params& sp,
                   int block_m, int ctas_per_sm, unsigned* grid) {
  cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes));
  if (e != cudaSuccess) return int(e);
  int device = 0, sms = 0;
  e = cudaGetDevice(&device);
  if (e != cudaSuccess) return int(e);
  e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return int(e);
  const Scheduler sched(tile_shape(p), sp, block_m);
  const int64_t g = Scheduler::grid_size(sched.num_tiles(), sms, ctas_per_sm);
  if (g < 1 || g > 0x7fffffff) return int(cudaErrorInvalidConfiguration);
  *grid = unsigned(g);
  return 0;
}

}  // namespace xstage::attention
