#pragma once
// Launches of the attention forward kernels, callable from host C++. Each
// returns a cudaError_t as an int (0 on success). Arguments are validated by
// the caller (src/runtime/attention.cpp); the .cu side stays free of host
// libraries (nvcc cannot compile fmt's headers).
#include <cuda_runtime_api.h>

#include "device/attention/attention_params.hpp"

namespace xstage::attention {

// Kernel choice, as ints (the values of xstage::AttentionKernel).
enum KernelId : int {
  kKernelAuto = 0,            // the default for the head dim (attention_fwd_default_kernel)
  kKernelMmaSync = 1,         // sm90_bf16_attention_fwd: FlashAttention-2 structure on mma.sync
  kKernelWgmmaBasic = 2,      // sm90_bf16_attention_fwd_wgmma, GEMM and softmax in sequence
  kKernelWgmmaOverlap = 3,    // ... softmax of S_j under the P_{j-1} V_{j-1} GEMM
  kKernelWgmmaPingpong = 4,   // ... and the two consumer warpgroups take turns
  kKernelWgmmaPingpongN192 = 5,  // ping-pong with 192-key tiles (D = 64 only)
  kKernelWgmmaM192 = 6,          // three consumer warpgroups (192 query rows), ping-pong (D = 64 only)
  kKernelWgmmaM192Overlap = 7,   // three consumer warpgroups, intra-warpgroup overlap only (D = 64 only)
};

// The kernel that kKernelAuto picks for head dim D.
int attention_fwd_default_kernel(int D);

// The local-store epilogue with the linear tile order; p.D selects the kernel.
int launch_attention_fwd_local(const MainloopParams& p, const LocalStoreParams& ep, cudaStream_t stream);
// Same with an explicit kernel (KernelId); cudaErrorInvalidValue for an unknown one.
int launch_attention_fwd_local_kernel(const MainloopParams& p, const LocalStoreParams& ep, int kernel,
                                      cudaStream_t stream);

// Tile shape of the kernel for head dim D (0 for an unsupported D), for reports.
struct KernelShape {
  int block_m = 0, block_n = 0, threads = 0;
  size_t smem_bytes = 0;
};
// The default kernel's shape (BLOCK_M is what tile schedules and the Ulysses flags count in).
KernelShape attention_fwd_kernel_shape(int D);
KernelShape attention_fwd_kernel_shape_of(int D, int kernel);

// CTAs of the mma.sync head-dim-D kernel resident on one SM (occupancy API; 0
// for an unsupported D or a CUDA error).
int attention_fwd_ctas_per_sm(int D);
// The same for kKernelMmaSync or kKernelWgmmaPingpong (128-key tiles): the two
// kernels the fused Ulysses attention launches (0 for any other).
int attention_fwd_ctas_per_sm_of(int D, int kernel);

// ---- the wgmma kernel with the local store (attention_wgmma_d64.cu, attention_wgmma_d128.cu)
int launch_attention_wgmma_local_d64(const MainloopParams& p, const LocalStoreParams& ep, int kernel,
                                     cudaStream_t stream);
int launch_attention_wgmma_local_d128(const MainloopParams& p, const LocalStoreParams& ep, int kernel,
                                      cudaStream_t stream);
int attention_wgmma_pingpong_ctas_per_sm_d64();
int attention_wgmma_pingpong_ctas_per_sm_d128();

}  // namespace xstage::attention
