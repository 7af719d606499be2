// The fused MoE layer's kernels enqueued from a MoeLayerLaunch
// (moe_layer_launch.hpp): what MoeLayer and the caller-owned rank path share.
#include "runtime/moe/moe_layer_launch.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "device/moe/fused_layer_launch.hpp"
#include "device/moe/layer_comm_launch.hpp"
#include "device/sched/claim_policy.hpp"
#include "runtime/comm/flag_timeout.hpp"
#include "runtime/moe/moe_device_ids.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"

namespace xstage {

namespace {

// Warps of the pull kernel take rows grid-stride: enough CTAs to fill the
// GPU twice over, no more than the rows need.
int copy_grid(int64_t rows, int warps_per_cta, int sms) {
  const int64_t need = (rows + warps_per_cta - 1) / warps_per_cta;
  return int(std::clamp<int64_t>(need, 1, 2 * int64_t(std::max(sms, 1))));
}

}  // namespace

void enqueue_moe_dispatch(const MoeLayerLaunch& l, uint64_t epoch, bool copy_rows, bool counts_one_behind,
                          cudaStream_t stream) {
  moe::RouteParams rp;
  rp.topk_ids = l.topk_ids, rp.topk_weights = l.topk_weights, rp.tokens = l.tokens;
  rp.routes = l.routes, rp.counts = l.counts, rp.flags = l.flags;
  rp.pos = l.pos, rp.send_base = l.send_base, rp.done_ctas = l.route_done, rp.input_error = l.input_error;
  rp.rank0 = l.rank0, rp.n = l.n, rp.P = l.P, rp.E = l.E, rp.E_loc = l.E_loc, rp.k = l.k, rp.T_max = l.T_max;
  rp.epoch = counts_one_behind ? epoch - 1 : epoch;
  rp.epoch_at = l.epoch_at;
  check_cuda(moe::launch_moe_route(rp, stream), "MoE layer: route kernel launch", __FILE__, __LINE__);

  moe::PullParams pp;
  pp.x_send = l.x_send, pp.routes = l.routes, pp.counts = l.counts;
  pp.pool_x = l.pool_x, pp.row_weight = l.row_weight, pp.row_dest_rank = l.row_dest_rank;
  pp.row_dest_slot = l.row_dest_slot, pp.row_perm = l.row_perm, pp.offs = l.offs;
  pp.rank0 = l.rank0, pp.n = l.n, pp.P = l.P, pp.E_loc = l.E_loc, pp.k = l.k, pp.T_max = l.T_max, pp.H = l.H;
  pp.plan = l.pull_plan, pp.rows_cap = l.rows_cap, pp.copy_rows = copy_rows;
  pp.epoch = epoch, pp.timeout_ns = l.timeout_ns, pp.timeout_record = l.records + kWaitPull;
  enqueue_moe_wait_flags(l, epoch, moe::layer_flag_counts(0), kWaitPull, stream);
  // A warp a row when it copies them, else a lane a row (the plan only).
  const int64_t warp_rows = copy_rows ? l.n * l.rows_cap : (l.n * l.rows_cap + 31) / 32;
  check_cuda(moe::launch_moe_pull(pp, copy_grid(warp_rows, 16, l.sms), stream), "MoE layer: pull kernel launch",
             __FILE__, __LINE__);
}

void enqueue_moe_wait_flags(const MoeLayerLaunch& l, uint64_t epoch, int first, MoeWait record, cudaStream_t stream) {
  moe::WaitFlagsParams p;
  p.flags = l.flags;
  p.rank0 = l.rank0, p.n = l.n, p.P = l.P, p.first = first;
  p.epoch = epoch, p.epoch_at = l.epoch_at, p.timeout_ns = l.timeout_ns, p.timeout_record = l.records + record;
  if (record == kWaitCombine) {  // this rank's own rows never come after a failed pull or expert kernel
    static_assert(kWaitPull == 0 && kWaitExperts == 1 && kWaitCombine == 2, "the earlier records come first");
    p.earlier_records = l.records, p.earlier_count = kWaitCombine;
  }
  check_cuda(moe::launch_moe_wait_flags(p, stream), "MoE layer: flag wait kernel launch", __FILE__, __LINE__);
}

void enqueue_moe_experts_fused(const MoeLayerLaunch& l, uint64_t epoch, const MoeSchedulePlan& plan, bool remote,
                               const moe::FusedTrace* trace, cudaStream_t stream) {
  moe::FusedLayerParams p;
  p.x_pool = l.pool_x, p.h = l.h, p.w13 = l.w13, p.w2 = l.w2, p.offs = l.offs, p.row_weight = l.row_weight;
  p.row_dest_rank = l.row_dest_rank, p.row_dest_slot = l.row_dest_slot;
  p.rows_cap = int(l.n * l.rows_cap), p.hidden = l.H, p.inter = l.I, p.E_run = l.n * l.E_loc;
  if (remote) {
    p.combine = l.combine;
    p.flags = l.flags;
    p.done_flag = moe::layer_flag_done(l.P, 0), p.rank0 = l.rank0, p.local_ranks = l.n, p.world = l.P;
    p.epoch = epoch, p.epoch_at = l.epoch_at;
    p.x_send = l.x_send, p.T_max = l.T_max;  // the dispatch's rows copied in the kernel
    p.pull_record = l.records + kWaitPull;
  } else {
    p.out_pool = l.pool_out;  // the floor: every store local, no flags
  }
  p.schedule = fused_schedule(plan);
  if (p.schedule == moe::kScheduleExpertWave) {
    p.wave_tiles = plan.wave_tiles;
  } else {
    p.l2_share = float(plan.l2_share);
    const bool interleaved = plan.schedule == MoeSchedule::interleaved;  // model-guided keeps its lag
    p.lag_tiles = interleaved ? sched::claim_lag_tiles(plan.lag_tiles, l.sms) : plan.lag_tiles;
  }
  p.counters = l.counters;
  p.timeout_ns = l.timeout_ns, p.timeout_record = l.records + kWaitExperts;
  check_cuda(moe::launch_fused_layer(p, fused_tile_id(l.tile), stream, trace),
             fmt::format("MoE layer: fused expert kernel launch (ranks {} .. {}, tile {})", l.rank0, l.rank0 + l.n - 1,
                         to_string(l.tile))
                 .c_str(),
             __FILE__, __LINE__);
}

void enqueue_moe_combine(const MoeLayerLaunch& l, uint64_t epoch, bool fused, cudaStream_t stream) {
  moe::CombineParams p;
  p.combine = l.combine, p.out = l.out, p.tokens = l.tokens;
  p.topk_ids = l.topk_ids, p.pos = l.pos;
  if (!fused) p.send_base = l.send_base;
  p.rank0 = l.rank0, p.n = l.n, p.P = l.P, p.E = l.E, p.k = l.k, p.T_max = l.T_max, p.H = l.H;
  p.epoch = epoch, p.timeout_ns = l.timeout_ns, p.timeout_record = l.records + kWaitCombine;
  // After a failed wait this rank's rows are another run's: the combine leaves
  // the output as it was (unfused too: its GEMMs and copies ran on them).
  p.earlier_records = l.records, p.earlier_count = kWaitCombine;
  if (fused) enqueue_moe_wait_flags(l, epoch, moe::layer_flag_done(l.P, 0), kWaitCombine, stream);
  check_cuda(moe::launch_moe_combine(p, stream), "MoE layer: combine kernel launch", __FILE__, __LINE__);
}

void check_moe_schedule_plan(const MoeSchedulePlan& plan) {
  if (plan.wave_tiles < 0 || plan.lag_tiles < 0 || !(plan.l2_share >= 0 && plan.l2_share <= 1))
    throw Error(
        fmt::format("MoE layer: schedule plan ({}): expected wave_tiles >= 0, 0 <= l2_share <= 1, "
                    "lag_tiles >= 0; got {}, {}, {}",
                    to_string(plan.schedule), plan.wave_tiles, plan.l2_share, plan.lag_tiles));
}

namespace {

std::string describe_wait(int P, int wait, const remote::FlagTimeoutRecord& r, int rank0, int n) {
  const std::string values = timed_out_values(r);
  switch (wait) {
    case kWaitPull:
      return fmt::format(
          "MoE layer: dispatch wait timed out: rank {} waited on flag {} (the counts of source {}) {}; "
          "that source's route kernel never published them (not started, or stuck)",
          r.rank, r.flag, r.flag - moe::layer_flag_counts(0), values);
    case kWaitExperts:
      return r.rank == -2 ? fmt::format("MoE layer: the fused expert kernel of ranks {} .. {} timed out: an L1 tile of "
                                        "the launch's expert {} waited for a block of its pool rows copied from "
                                        "the sources' send buffers {}",
                                        rank0, rank0 + n - 1, r.flag, values)
                          : fmt::format("MoE layer: the fused expert kernel of ranks {} .. {} timed out: an L2 tile of "
                                        "the launch's expert {} waited for that expert's L1 tiles done {}",
                                        rank0, rank0 + n - 1, r.flag, values);
    default:
      return fmt::format(
          "MoE layer: combine wait timed out: rank {} waited on flag {} (the expert rows of rank {}) {}; "
          "that rank's fused expert kernel never finished",
          r.rank, r.flag, r.flag - moe::layer_flag_done(P, 0), values);
  }
}

std::string describe_input(const moe::RouteInputError& e, int E) {
  if (e.kind == moe::kRouteIdOutOfRange)
    return fmt::format(
        "MoE layer: rank {}, token {}, slot {}: topk id {} is outside 0 .. {} (E - 1); the pair was "
        "left out",
        e.rank, e.token, e.slot, e.id, E - 1);
  return fmt::format(
      "MoE layer: rank {}, token {}, slot {}: topk id {} repeats an earlier slot's expert (a token's k "
      "experts must be distinct); the repeat was left out",
      e.rank, e.token, e.slot, e.id);
}

}  // namespace

std::string describe_moe_records(int P, int rank0, int n, int E, const remote::FlagTimeoutRecord* records,
                                 const moe::RouteInputError& input) {
  for (int i = 0; i < kWaitCount; ++i)
    if (records[i].set != 0) return describe_wait(P, i, records[i], rank0, n);
  if (input.set != 0) return describe_input(input, E);
  return "";
}

}  // namespace xstage
