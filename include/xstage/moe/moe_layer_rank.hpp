#pragma once
// The fused expert-parallel MoE layer for one rank, on buffers the caller
// owns: a framework that manages memory, peers and streams itself
// (python/xstage over torch symmetric memory) hands in the tables of every
// rank's symmetric areas, as a World's buffers do for MoeLayer. Same
// kernels, flag layout and launch sequence (src/runtime/moe/
// moe_layer_launch.hpp); nothing here allocates or synchronises.
//
// Per rank, two allocations:
//   symmetric  symmetric_bytes, at the same offsets on every rank, zeroed
//              before the first run on any rank: x_send, routes, counts,
//              combine and the flags (moe_layer.hpp's layouts);
//   workspace  workspace_bytes of this rank's device memory, zeroed once
//              before the first run: the pool, per-row and per-pair
//              metadata, claim counters, wait records and the run's epoch.
// A run: the caller writes its T tokens into x_send rows 0 .. T-1 and their
// top-k ids (int32) and weights (fp32) into the workspace's topk_ids /
// topk_weights rows, then moe_rank_forward enqueues the rest on its stream.
// The epoch lives in the workspace and the run's first kernel advances it,
// so repeated runs and CUDA graph replays need no flag reset and no host
// value; every rank must run the same number of times (the epochs agree).
#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include "xstage/moe/moe_layer.hpp"

namespace xstage {

// Where a rank's areas lie (bytes from each allocation's start, 256-byte
// aligned), and what they add up to. CPU only: validates the options for P
// ranks (validate_moe_layer_options, plus the dispatch plan's shared memory).
struct MoeRankLayout {
  MoeTile tile = MoeTile::m128n256;  // resolved
  int64_t rows_cap = 0;
  // symmetric
  size_t x_send = 0, routes = 0, counts = 0, combine = 0, flags = 0, symmetric_bytes = 0;
  // workspace
  size_t pool_x = 0, pool_h = 0, row_meta = 0, topk_ids = 0, topk_weights = 0, records = 0, epoch = 0;
  size_t workspace_bytes = 0;
  size_t records_bytes = 0;  // the wait records and the routing record, one block (moe_rank_describe_records)
  // The module's weights (not in either allocation): bf16 w13 + w2 of E/P experts.
  size_t weight_bytes = 0;
};
MoeRankLayout moe_rank_layout(const MoeLayerOptions& o, int P);

// Loads the layer's kernels on the current device (once, before the first
// run: under lazy loading a first launch behind a flag wait could block the
// host until the wait times out) and checks that the GPU is sm_90.
void moe_rank_prepare(const MoeLayerOptions& o, int P);

// The schedule plan a run of T tokens a rank takes: expert-wave or
// interleaved as MoeLayer's defaults; model-guided from the profile
// (embedded name or file; "" = h200-peer, one rank a GPU) for sms SMs.
MoeSchedulePlan moe_rank_plan(const MoeLayerOptions& o, int P, int T, MoeSchedule schedule,
                              const std::string& profile, int sms);

enum MoeRankArea : int { kAreaXSend = 0, kAreaRoutes, kAreaCounts, kAreaCombine, kAreaFlags, kAreaCount };

struct MoeRankArgs {
  MoeLayerOptions options;
  int P = 1, rank = 0;
  // Device memory [kAreaCount][P]: rank p's pointer to area a at a * P + p
  // (its symmetric base + the layout's offset, as this process maps it).
  void* const* tables = nullptr;
  void* workspace = nullptr;  // this rank's, layout.workspace_bytes
  size_t workspace_bytes = 0;
  const void* w13 = nullptr;  // bf16 [E/P, 2I, H], gate/up interleaved (moe_interleave_w13)
  const void* w2 = nullptr;   // bf16 [E/P, H, I]
  void* out = nullptr;        // bf16 [T, H]
  int T = 0;                  // 0 .. T_max
  MoeSchedulePlan plan;
  int sms = 0;  // of the current device (the interleaved lag's default); 0: asked
};

// Validates (options, rank, T, pointers and their alignment, the plan;
// throws xstage::Error naming the argument), then enqueues the run on `stream`.
void moe_rank_forward(const MoeRankArgs& a, cudaStream_t stream);

// What a host copy of the layout's records block says: the first wait that
// timed out (rank, flag, expected and seen values) or the first bad routing
// pair, "" if none. The caller clears the block after a report.
std::string moe_rank_describe_records(const void* host_records, int P, int rank, int E);

}  // namespace xstage
