#pragma once
// Launches of the fused Ulysses attention and of its receiver wait, callable
// from host C++; each returns a cudaError_t as int (0 on success). The host
// side (src/runtime/ulysses.cpp) validates and builds the parameters.
#include <cuda_runtime_api.h>

#include "device/attention/attention_params.hpp"
#include "device/attention/ulysses_params.hpp"

namespace xstage::attention {

// Attention over the launch's ranks with the all-to-all in the epilogue.
// completion: when each tile's flags are published (coupled: after its
// stores are remotely visible).
int launch_ulysses_attention(const MainloopParams& p, const UlyssesStoreParams& ep,
                             const OrderedSchedulerParams& sp, StorePath path, Completion completion,
                             cudaStream_t stream);

// Waits (on the GPU, in stream order) for the flags of ranks
// [rank_first, rank_first + n_ranks) to reach ep.epoch; traps with a message
// after timeout_ns.
int launch_ulysses_wait(const UlyssesStoreParams& ep, int rank_first, int n_ranks, int block_m,
                        unsigned long long timeout_ns, cudaStream_t stream);

}  // namespace xstage::attention
