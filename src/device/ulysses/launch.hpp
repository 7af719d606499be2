#pragma once
// Launches of the fused Ulysses attention (with ep.receive, the grid's last
// CTA waits for the receivers' flags: remote/receive.cuh), callable from host
// C++; each returns a cudaError_t as int (0 on success). The host side
// (src/runtime/ulysses) validates and builds the parameters.
#include <cuda_runtime_api.h>

#include "device/attention/attention_params.hpp"
#include "device/sched/ordered_params.hpp"
#include "device/ulysses/params.hpp"
#include "xstage/comm/remote_store.hpp"

namespace xstage::ulysses {

// Attention over the launch's ranks with the all-to-all in the epilogue.
// completion: when each tile's flags are published (coupled: after its
// stores are remotely visible). kernel: kKernelMmaSync or kKernelWgmmaPingpong
// (device/attention/attention_launch.hpp; both have BLOCK_M = 128); the wgmma
// kernel runs every path but vector16-wt and vector16-cs (else
// cudaErrorNotSupported).
int launch_ulysses_attention(const attention::MainloopParams& p, const UlyssesStoreParams& ep,
                             const sched::OrderedSchedulerParams& sp, StorePath path, Completion completion,
                             int kernel, cudaStream_t stream);

// The wgmma instantiations, one file per head dim (launch_wgmma_d*.cu).
int launch_ulysses_attention_wgmma_d64(const attention::MainloopParams& p, const UlyssesStoreParams& ep,
                                       const sched::OrderedSchedulerParams& sp, StorePath path,
                                       Completion completion, cudaStream_t stream);
int launch_ulysses_attention_wgmma_d128(const attention::MainloopParams& p, const UlyssesStoreParams& ep,
                                        const sched::OrderedSchedulerParams& sp, StorePath path,
                                        Completion completion, cudaStream_t stream);

}  // namespace xstage::ulysses
