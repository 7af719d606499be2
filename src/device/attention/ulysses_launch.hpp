#pragma once
// Launches of the fused Ulysses attention (with ep.receive, the grid's last
// CTA waits for the receivers' flags: device/attention/ulysses_wait.cuh), callable
// from host C++; each returns a cudaError_t as int (0 on success). The host
// side (src/runtime/ulysses.cpp) validates and builds the parameters.
#include <cuda_runtime_api.h>

#include "device/attention/attention_params.hpp"
#include "device/attention/ulysses_params.hpp"

namespace xstage::attention {

// Attention over the launch's ranks with the all-to-all in the epilogue.
// completion: when each tile's flags are published (coupled: after its
// stores are remotely visible). kernel: kKernelMmaSync or kKernelWgmmaPingpong
// (attention_launch.hpp; both have BLOCK_M = 128); the wgmma kernel runs the
// store paths vector16, bulk and paced (else cudaErrorNotSupported).
int launch_ulysses_attention(const MainloopParams& p, const UlyssesStoreParams& ep,
                             const OrderedSchedulerParams& sp, StorePath path, Completion completion, int kernel,
                             cudaStream_t stream);

// The wgmma instantiations, one file per head dim (ulysses_launch_wgmma_d*.cu).
int launch_ulysses_attention_wgmma_d64(const MainloopParams& p, const UlyssesStoreParams& ep,
                                       const OrderedSchedulerParams& sp, StorePath path, Completion completion,
                                       cudaStream_t stream);
int launch_ulysses_attention_wgmma_d128(const MainloopParams& p, const UlyssesStoreParams& ep,
                                        const OrderedSchedulerParams& sp, StorePath path, Completion completion,
                                        cudaStream_t stream);

}  // namespace xstage::attention
