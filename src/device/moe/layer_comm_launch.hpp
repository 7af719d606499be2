#pragma once
// Launches of the MoE layer's communication kernels (layer_comm_params.hpp),
// callable from host C++. Each returns a cudaError_t as an int (0 on
// success); arguments are validated by the caller (src/runtime/moe/).
#include <cuda_runtime_api.h>

#include <cstddef>

#include "device/moe/layer_comm_params.hpp"

namespace xstage::moe {

// Grid (E, n): one CTA per global expert and source.
int launch_moe_route(const RouteParams& p, cudaStream_t stream);

// One CTA: the timed wait (WaitFlagsParams).
int launch_moe_wait_flags(const WaitFlagsParams& p, cudaStream_t stream);

// Two kernels: one CTA builds the plan (p.plan, p.offs) from every source's
// counts, after a launch_moe_wait_flags for the counts flags in the same
// stream; then `grid` CTAs (persistent: each warp takes 32 rows at a time,
// grid-stride) write the rows' metadata and copy the rows. Shared memory:
// moe_pull_smem_bytes; it must not exceed moe_pull_max_smem_bytes().
int launch_moe_pull(const PullParams& p, int grid, cudaStream_t stream);
size_t moe_pull_smem_bytes(int n, int P, int E_loc);
size_t moe_pull_max_smem_bytes();

// Grid (ceil(T_max / 8), n): a warp a token.
int launch_moe_combine(const CombineParams& p, cudaStream_t stream);

// One thread: RunBeginParams (the caller-owned path's epoch and T).
int launch_moe_run_begin(const RunBeginParams& p, cudaStream_t stream);

// `grid` CTAs, a warp a row.
int launch_moe_permute(const PermuteParams& p, int grid, cudaStream_t stream);

// Loads every kernel above on the current device (cudaFuncGetAttributes).
// Under CUDA's lazy loading a kernel's first launch may wait for the device
// to go idle; one launched behind a timed flag wait whose flag comes from
// another GPU's kernel, which the host enqueues only afterwards (peer: one
// process drives every GPU), would wait the whole timeout.
int preload_moe_layer_comm_kernels();
// Its parts, one a kernel file.
int preload_moe_route();
int preload_moe_wait_flags();
int preload_moe_pull();
int preload_moe_combine();
int preload_moe_permute();
int preload_moe_run_begin();

}  // namespace xstage::moe
