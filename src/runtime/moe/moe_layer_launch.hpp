#pragma once
// The fused MoE layer's launch sequence for the ranks one GPU drives, on
// plain pointers: MoeLayer (moe_layer.cpp) builds a MoeLayerLaunch from a
// World's symmetric buffers and its own allocations; moe_layer_rank.cpp
// builds one from the caller's (torch symmetric memory, through the C ABI).
// Both enqueue the same kernels in the same order; neither the kernels nor
// this file know which made the pointers. Order and flags:
// docs/design/moe-layer.md.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "device/moe/fused_layer_params.hpp"
#include "device/moe/layer_comm_params.hpp"
#include "device/remote/flag_timeout_record.hpp"
#include "xstage/moe/moe_layer.hpp"

namespace xstage {

// The timed waits whose records the host reads after a run, in this order
// in one array (the route's input record follows them in the rank path).
enum MoeWait : int { kWaitPull = 0, kWaitExperts = 1, kWaitCombine = 2, kWaitCount = 3 };

struct MoeLayerLaunch {
  // Ranks rank0 .. rank0 + n - 1 of P; private arrays packed rank after rank.
  int rank0 = 0, n = 1, P = 1, E = 1, E_loc = 1, k = 1, H = 0, I = 0, T_max = 1;
  int64_t rows_cap = 0;  // per rank
  MoeTile tile = MoeTile::m128n256;  // resolved
  int sms = 0;                       // of the launch's GPU
  uint64_t timeout_ns = 0;
  // Symmetric areas: device tables [P] (layer_comm_params.hpp's layouts).
  void* const* x_send = nullptr;
  void* const* routes = nullptr;
  void* const* counts = nullptr;
  void* const* combine = nullptr;
  uint64_t* const* flags = nullptr;
  // Local device memory, packed over the n ranks.
  const void* w13 = nullptr;  // bf16 [n][E_loc, 2I, H], gate/up interleaved
  const void* w2 = nullptr;   // bf16 [n][E_loc, H, I]
  void* pool_x = nullptr;     // bf16 [n rows_cap, H]
  void* h = nullptr;          // bf16 [n rows_cap, I]
  void* pool_out = nullptr;   // bf16 [n rows_cap, H]: compute-only and unfused only
  void* out = nullptr;        // bf16 [n][T_max, H] (n = 1: T rows suffice)
  int32_t *offs = nullptr, *row_dest_rank = nullptr, *row_dest_slot = nullptr, *row_perm = nullptr;
  float* row_weight = nullptr;
  const int32_t* topk_ids = nullptr;    // [n][T_max k]
  const float* topk_weights = nullptr;  // [n][T_max k]
  int32_t *pos = nullptr, *send_base = nullptr, *tokens = nullptr, *route_done = nullptr;
  int32_t *pull_plan = nullptr, *counters = nullptr;
  remote::FlagTimeoutRecord* records = nullptr;  // [kWaitCount]
  moe::RouteInputError* input_error = nullptr;
  // The run's epoch in device memory (launch_moe_run_begin advances it), or
  // null: the epoch each call passes.
  const uint64_t* epoch_at = nullptr;
};

// Route, the counts wait, and the pull (copy_rows false: the plan only, the
// fused kernel copies the rows). counts_one_behind: the test hook
// MoeLayerOptions::test_counts_never_come.
void enqueue_moe_dispatch(const MoeLayerLaunch& l, uint64_t epoch, bool copy_rows, bool counts_one_behind,
                          cudaStream_t stream);
// The timed wait kernel for flags [first + r] (r < P) of each of the launch's ranks.
void enqueue_moe_wait_flags(const MoeLayerLaunch& l, uint64_t epoch, int first, MoeWait record, cudaStream_t stream);
// The fused expert kernel: remote, L2's rows into the owners' combine buffers
// (and the rows copied from the sources' x_send); else into pool_out.
void enqueue_moe_experts_fused(const MoeLayerLaunch& l, uint64_t epoch, const MoeSchedulePlan& plan, bool remote,
                               const moe::FusedTrace* trace, cudaStream_t stream);
// fused: the wait for every rank's done flag, then the sum; else the sum of
// the unfused baseline's flat rows (stream order stands in for the flags).
void enqueue_moe_combine(const MoeLayerLaunch& l, uint64_t epoch, bool fused, cudaStream_t stream);

// Throws xstage::Error naming the field when a plan is outside its ranges.
void check_moe_schedule_plan(const MoeSchedulePlan& plan);

// What a host copy of a launch's records says: the first wait that timed
// out, naming rank, flag and values, else bad routing input, else "".
std::string describe_moe_records(int P, int rank0, int n, int E, const remote::FlagTimeoutRecord* records,
                                 const moe::RouteInputError& input);

}  // namespace xstage
