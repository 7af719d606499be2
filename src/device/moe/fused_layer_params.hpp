#pragma once
// Plain parameter block of the fused expert layer kernel (fused_layer_sm90.cuh):
// L1 + SwiGLU and L2 of every expert of the launch's ranks in one persistent
// launch, tiles claimed from two global counters in the order the schedule
// policy allows, L2's epilogue storing each output row straight into the
// combine buffer of the rank that owns the token. Shared by .cu files and
// host C++ (no CUDA types).
//
// Layout (rows of the launch's experts one after another, expert-major, as
// in moe_params.hpp; "the launch's experts" are every local rank's experts,
// rank after rank, so emulated ranks on one GPU run as one launch):
//   x_pool  bf16 [rows_cap, hidden]     the dispatched token rows
//   h       bf16 [rows_cap, inter]      L1's output (SwiGLU, times row_weight)
//   w13     bf16 [E_run, 2 inter, hidden]   gate/up interleaved (moe_interleave_w13)
//   w2      bf16 [E_run, hidden, inter]
//   offs    int32 [E_run] cumulative row ends (device)
//   row_weight fp32 [rows_cap] or null; row_dest int32 [rows_cap]:
//     destination of pool row r: rank row_dest_rank[r], slot row_dest_slot[r]
//     (the row goes to combine[rank] + slot * hidden elements).
#include <cstdint>

#include "device/remote/flag_timeout_record.hpp"

namespace xstage::moe {

// The order in which tiles are claimed (docs/design/moe-layer.md).
enum FusedSchedule : int {
  kScheduleExpertWave = 0,  // a wave's L1 tiles, then its L2 tiles, wave after wave
  kScheduleShare = 1,       // L1 and L2 mixed: L2 takes `l2_share` of the claimed work
};

// Pool rows one copied-rows counter covers: a multiple of the copies' chunk
// of 4 rows (so a chunk never straddles two blocks) that divides both tiles'
// BLOCK_M.
inline constexpr int kFusedCopyBlockRows = 64;
inline constexpr int kFusedCopyChunkRows = 4;
static_assert(kFusedCopyBlockRows % kFusedCopyChunkRows == 0);

struct FusedLayerParams {
  const void* x_pool = nullptr;
  void* h = nullptr;
  const void* w13 = nullptr;
  const void* w2 = nullptr;
  const int32_t* offs = nullptr;
  const float* row_weight = nullptr;
  const int32_t* row_dest_rank = nullptr;
  const int32_t* row_dest_slot = nullptr;
  int rows_cap = 0, hidden = 0, inter = 0, E_run = 0;

  // L2's destination: remote (combine != nullptr: each rank's combine buffer,
  // bf16 rows of `hidden`) or local (out_pool: bf16 [rows_cap, hidden], the
  // compute-only floor and the unfused baseline's L2).
  void* const* combine = nullptr;
  void* out_pool = nullptr;

  // Schedule: claims from two counters (workspace below).
  int schedule = kScheduleExpertWave;
  int wave_tiles = 0;      // expert-wave: L1 tiles a wave holds at least (0: 2 x grid)
  float l2_share = 0.f;    // share: L2 work / all work claimed (0: L2 work / total work, even spread)
  int lag_tiles = 0;       // share: L1 tiles claimed past an expert's last before its L2 may be claimed

  // The dispatch's row copies inside the kernel (x_send != nullptr): the
  // producer warpgroup's spare warps copy pool row r from its source's send
  // buffer, x_send[row_dest_rank[r]] + (row_dest_slot[r] % T_max) * hidden,
  // into x_pool (which the kernel then writes), in pool order, while the
  // first L1 tiles compute; an L1 tile waits for the pool rows it reads
  // (counted per block of kFusedCopyBlockRows rows). Null: x_pool already
  // holds the rows.
  void* const* x_send = nullptr;
  int T_max = 0;

  // Workspace (zeroed once before the first launch; every launch leaves it zeroed):
  // int32 [fused_layer_counter_ints(E_run, rows_cap)]: claim counters L1, L2,
  // finished CTAs, the row copies' cursor, then per expert its L1 tiles done,
  // then per block of kFusedCopyBlockRows pool rows its rows copied.
  int32_t* counters = nullptr;

  // Completion (remote only): once every tile of the launch is stored, the
  // grid's last CTA sets flags[d][done_flag + s] = epoch for every
  // destination rank d < world and every local rank s = rank0 .. rank0 + local_ranks - 1.
  uint64_t* const* flags = nullptr;
  int done_flag = 0, rank0 = 0, local_ranks = 1, world = 1;
  uint64_t epoch = 0;
  // Device memory holding the epoch (read in place of `epoch`), or null:
  // as RouteParams::epoch_at (layer_comm_params.hpp).
  const uint64_t* epoch_at = nullptr;

  // Waits inside the kernel (an L2 tile on its expert's L1 tiles, rank = -1;
  // an L1 tile on a block of its rows copied, rank = -2) time out after
  // timeout_ns and fill timeout_record (flag = the expert; expected / seen =
  // tiles or rows); once it is set, every later wait stops at once.
  uint64_t timeout_ns = 10'000'000'000ull;
  remote::FlagTimeoutRecord* timeout_record = nullptr;

  // The record of the dispatch's wait ahead of this launch (remote only;
  // null: none; it stays set until check_waits() reports it). Set, the
  // counts never came and the pool holds an earlier run's plan: the kernel
  // stores nothing and publishes no done flag, so the ranks that wait for
  // this rank's rows time out naming it instead of summing rows of another
  // run. A wait of the kernel's own that times out (timeout_record) also
  // keeps its done flags unpublished.
  const remote::FlagTimeoutRecord* pull_record = nullptr;
};

// The per-tile trace of a fused run (xstage moe --trace): uint64 [2][tiles][4]:
// [gemm][claim index] = {mainloop start, epilogue start, epilogue end
// (globaltimer ns), smid}. A diagnostic, so not in the production parameter
// block: a launch given one runs a separately compiled kernel that stamps
// the times; every other launch runs a kernel without that code.
struct FusedTrace {
  uint64_t* buf = nullptr;
  int tiles = 0;  // capacity per GEMM
};

// Tile shapes the fused kernel is compiled for (one for both GEMMs).
enum FusedTile : int { kFusedM128N256 = 0, kFusedM64N256 = 1 };

}  // namespace xstage::moe
