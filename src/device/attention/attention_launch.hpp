#pragma once
// Launches of the attention forward kernels, callable from host C++. Each
// returns a cudaError_t as an int (0 on success). Arguments are validated by
// the caller (src/runtime/attention.cpp); the .cu side stays free of host
// libraries (nvcc cannot compile fmt's headers).
#include <cuda_runtime_api.h>

#include "device/attention/attention_params.hpp"

namespace xstage::attention {

// The local-store epilogue with the linear tile order; p.D selects the kernel.
int launch_attention_fwd_local(const MainloopParams& p, const LocalStoreParams& ep, cudaStream_t stream);

// Tile shape of the kernel for head dim D (0 for an unsupported D), for reports.
struct KernelShape {
  int block_m = 0, block_n = 0, threads = 0;
  size_t smem_bytes = 0;
};
KernelShape attention_fwd_kernel_shape(int D);

// CTAs of the head-dim-D kernel resident on one SM (occupancy API; 0 for an
// unsupported D or a CUDA error).
int attention_fwd_ctas_per_sm(int D);

}  // namespace xstage::attention
