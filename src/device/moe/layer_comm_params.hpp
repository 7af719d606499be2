#pragma once
// Plain parameter blocks of the MoE layer's communication kernels (dispatch:
// route and pull; combine; the unfused baseline's permute), shared by the .cu
// files and host C++ (no CUDA types). Data flow and layouts:
// docs/design/moe-layer.md.
//
// "A launch" covers the ranks one GPU drives: every rank of an emulated
// world (one launch), or one rank (peer, nccl). Its ranks are rank0 .. rank0
// + n - 1; their private arrays are laid out rank after rank in one
// allocation ("packed"), so the fused kernel sees every expert of the launch
// as one grouped problem.
//
// Symmetric areas of every rank r (pointer tables: [P] entries, rank r's at r):
//   x_send  bf16 [T_max, H]            rank r's tokens (its owners pull them)
//   routes  int32 [P][E_loc][T_max], then fp32 [P][E_loc][T_max]: for each
//           source s and local expert e_loc, the pairs t * k + j routed there
//           in token order, and their routing weights
//   counts  int32 [P][E_loc]           how many pairs each source routed to each local expert
//   combine bf16 [k][T_max][H]         fused: slot j of token t at row j * T_max + t;
//           unfused: flat rows in the source's send order
//   flags   uint64 [2P]                counts of source s: flag_counts(s);
//                                      expert rows of rank r stored: flag_done(P, r)
#include <cstdint>

#include "device/remote/flag_timeout_record.hpp"

namespace xstage::moe {

// Flag indices within a rank's flag array (layer_flag_count(P) of them).
inline constexpr int layer_flag_counts(int source) { return source; }
inline constexpr int layer_flag_done(int P, int expert_rank) { return P + expert_rank; }
inline constexpr int layer_flag_count(int P) { return 2 * P; }

// Bad routing input found on the device (the host cannot see the ids without
// a synchronisation): the first one is recorded, the rest of the run goes on
// with the pair left out, and the host reports it after the run.
struct RouteInputError {
  unsigned int set = 0;
  int rank = 0, token = 0, slot = 0, id = 0;
  int kind = 0;  // kRouteIdOutOfRange or kRouteIdRepeated
};
enum RouteInputErrorKind : int { kRouteIdOutOfRange = 1, kRouteIdRepeated = 2 };

// Route: one CTA per (global expert e, source of the launch).
struct RouteParams {
  const int32_t* topk_ids = nullptr;    // packed [n][T_max * k]
  const float* topk_weights = nullptr;  // packed [n][T_max * k]
  const int32_t* tokens = nullptr;      // [n]: T of each source
  void* const* routes = nullptr;        // table [P]
  void* const* counts = nullptr;        // table [P]
  uint64_t* const* flags = nullptr;     // table [P]
  // Local outputs for the unfused combine: pos[s][t * k + j] = the pair's
  // index among the pairs s routed to its expert; send_base[s][e] = the rows
  // s sends for experts below e (E + 1 entries: send order is global expert order).
  int32_t* pos = nullptr;        // packed [n][T_max * k]
  int32_t* send_base = nullptr;  // packed [n][E + 1]
  int32_t* done_ctas = nullptr;  // [n], zero; the last CTA of a source sets it back to zero
  RouteInputError* input_error = nullptr;
  int rank0 = 0, n = 1, P = 1, E = 1, E_loc = 1, k = 1, T_max = 1;
  uint64_t epoch = 0;
  // Device memory holding the run's epoch (read in place of `epoch`), or
  // null. Caller-owned layers (moe_layer_rank.hpp) keep the epoch on the
  // device, advanced by launch_moe_run_begin, so that a CUDA graph replay
  // publishes a new epoch without the host (a captured value would repeat).
  const uint64_t* epoch_at = nullptr;
};

// Pull, after a WaitFlagsParams wait for the counts flags of the launch's
// receivers: one CTA makes the plan, then a persistent grid writes each
// pool row's metadata and (copy_rows) copies the rows.
struct PullParams {
  void* const* x_send = nullptr;  // table [P]
  void* const* routes = nullptr;  // table [P]
  void* const* counts = nullptr;  // table [P]
  // Packed over the launch's receivers (n * rows_cap rows), pool order
  // (receiver, e_loc, source, i):
  void* pool_x = nullptr;            // bf16 [n * rows_cap, H]
  float* row_weight = nullptr;       // [n * rows_cap]
  int32_t* row_dest_rank = nullptr;  // the token's owner (the source)
  int32_t* row_dest_slot = nullptr;  // j * T_max + t in the owner's combine buffer
  int32_t* row_perm = nullptr;       // the row's index in send order (receiver, source, e_loc, i): unfused permute
  int32_t* offs = nullptr;           // [n * E_loc] cumulative row ends over the launch's experts
  // Device memory [2 (S + 1)], S = n E_loc P segments (receiver, e_loc,
  // source): the pool's and the send order's segment starts and totals,
  // written once by the plan kernel, read by every CTA of the copy kernel.
  int32_t* plan = nullptr;
  int rank0 = 0, n = 1, P = 1, E_loc = 1, k = 1, T_max = 1, H = 0;
  int64_t rows_cap = 0;  // per receiver
  uint64_t epoch = 0, timeout_ns = 0;
  remote::FlagTimeoutRecord* timeout_record = nullptr;
  // false: the pool's plan only (offsets, row_*), the rows left to the fused
  // kernel, which copies them while its first tiles compute.
  bool copy_rows = true;
};

// Combine: out[t] = bf16( sum_{j = 0 .. k-1} float(row j of token t) ), fp32
// in slot order, over the pairs the route kept (e = topk_ids[s][t * k + j]
// in range, pos[s][t * k + j] >= 0). Fused (send_base == nullptr): row j of
// t is combine[s] row j * T_max + t, after the wait kernel's timed wait for
// flag_done(P, r) of every rank r (a set timeout_record: the wait failed,
// nothing is summed). Unfused: row send_base[s][e] + pos[s][t * k + j] of the
// flat area; the stream order stands in for the flags.
struct CombineParams {
  void* const* combine = nullptr;   // table [P]
  void* out = nullptr;              // packed bf16 [n][T_max, H]
  const int32_t* tokens = nullptr;  // [n]
  const int32_t* topk_ids = nullptr;   // the route's input: a bad id's pair is left out
  const int32_t* pos = nullptr;        // the route's: < 0 for a repeated id's pair
  const int32_t* send_base = nullptr;  // unfused only (null: the fused layer's combine buffer)
  int rank0 = 0, n = 1, P = 1, E = 1, k = 1, T_max = 1, H = 0;
  uint64_t epoch = 0, timeout_ns = 0;
  remote::FlagTimeoutRecord* timeout_record = nullptr;
  // The records of the run's earlier waits on this GPU (the dispatch's, the
  // fused expert kernel's; they stay set until check_waits() reports them).
  // Any set: this rank's rows are not this run's (fused: its expert kernel
  // published none; unfused: its GEMMs ran on the pool as it was), and the
  // output keeps its last contents.
  const remote::FlagTimeoutRecord* earlier_records = nullptr;
  int earlier_count = 0;
};

// A timed wait, by one CTA, for flags[rank0 + g / P][first + g % P] >= epoch,
// g = 0 .. n P - 1: the pull's counts flags (first = flag_counts(0)) or the
// combine's done flags (first = flag_done(P, 0)). The kernels after it in
// the stream read what the flags vouch for; one CTA polls each flag once,
// where every CTA of those kernels polling it queued behind one another on
// the host path (perf-log, MoE layer L11).
struct WaitFlagsParams {
  uint64_t* const* flags = nullptr;
  int rank0 = 0, n = 1, P = 1, first = 0;
  uint64_t epoch = 0, timeout_ns = 0;
  const uint64_t* epoch_at = nullptr;  // as RouteParams::epoch_at
  remote::FlagTimeoutRecord* timeout_record = nullptr;
  // Earlier waits of the run (the combine's: the dispatch's and the expert
  // kernel's). Any set, the run is lost already and what this wait would
  // wait for may never come (this rank's own done flag): it returns at once,
  // leaving its record clear.
  const remote::FlagTimeoutRecord* earlier_records = nullptr;
  int earlier_count = 0;
};

// The start of a caller-owned run (moe_layer_rank.hpp), one thread:
// *epoch += 1 (the run's epoch, RouteParams::epoch_at) and tokens[0] = T
// (the route's and combine's token count), both from the stream, so that
// a captured graph's replays advance the epoch and need no host copy.
struct RunBeginParams {
  uint64_t* epoch = nullptr;
  int32_t* tokens = nullptr;
  int T = 0;
};

// Permute (unfused): dst[row_perm[g]] = src[g] for every row g of the launch's pool.
struct PermuteParams {
  const void* src = nullptr;  // bf16 [n * rows_cap, H] in pool order
  void* dst = nullptr;        // bf16 [n * rows_cap, H] in send order
  const int32_t* row_perm = nullptr;
  const int32_t* offs = nullptr;  // the pool's rows: offs[E_run - 1]
  int E_run = 1, H = 0;
  int64_t rows = 0;  // n * rows_cap
};

}  // namespace xstage::moe
