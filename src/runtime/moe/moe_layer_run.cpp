// One run of the MoE layer: the dispatch (route, pull), the experts (the
// fused kernel, or the unfused baseline's two grouped GEMMs) and the combine
// (the fused layer's flags-and-sum kernel, or the baseline's permute,
// all-to-all and sum). Order and flags: docs/design/moe-layer.md.
#include <cuda_runtime.h>

#include <algorithm>

#include <fmt/format.h>

#include "device/moe/fused_layer_launch.hpp"
#include "device/moe/layer_comm_launch.hpp"
#include "device/sched/claim_policy.hpp"
#include "runtime/moe/moe_layer_impl.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/moe/moe.hpp"

namespace xstage {

namespace {

uint64_t timeout_ns(double s) { return uint64_t(s * 1e9); }

// Warps of the pull and permute kernels take rows grid-stride: enough CTAs to
// fill the GPU twice over, no more than the rows need.
int copy_grid(int64_t rows, int warps_per_cta, int sms) {
  const int64_t need = (rows + warps_per_cta - 1) / warps_per_cta;
  return int(std::clamp<int64_t>(need, 1, 2 * int64_t(sms)));
}

}  // namespace

void MoeLayer::Impl::dispatch(Group& g, bool copy_rows) {
  const int li = w.local_index(g.rank0);
  auto* flag_table = reinterpret_cast<uint64_t* const*>(flags->device_table(li));
  moe::RouteParams rp;
  rp.topk_ids = g.topk_ids, rp.topk_weights = g.topk_weights, rp.tokens = g.tokens;
  rp.routes = routes->device_table(li), rp.counts = counts->device_table(li), rp.flags = flag_table;
  rp.pos = g.pos, rp.send_base = g.send_base, rp.done_ctas = g.route_done, rp.input_error = g.input_error;
  rp.rank0 = g.rank0, rp.n = g.n, rp.P = P, rp.E = E, rp.E_loc = E_loc, rp.k = k, rp.T_max = T_max;
  rp.epoch = o.test_counts_never_come ? epoch - 1 : epoch;
  check_cuda(moe::launch_moe_route(rp, g.stream), "MoE layer: route kernel launch", __FILE__, __LINE__);

  moe::PullParams pp;
  pp.x_send = x_send->device_table(li), pp.routes = rp.routes, pp.counts = rp.counts;
  pp.pool_x = g.pool_x, pp.row_weight = g.row_weight, pp.row_dest_rank = g.row_dest_rank;
  pp.row_dest_slot = g.row_dest_slot, pp.row_perm = g.row_perm, pp.offs = g.offs;
  pp.rank0 = g.rank0, pp.n = g.n, pp.P = P, pp.E_loc = E_loc, pp.k = k, pp.T_max = T_max, pp.H = H;
  pp.plan = g.pull_plan, pp.rows_cap = rows_cap, pp.copy_rows = copy_rows;
  pp.epoch = epoch, pp.timeout_ns = timeout_ns(o.timeout_s), pp.timeout_record = g.records + kWaitPull;
  wait_flags(g, moe::layer_flag_counts(0), kWaitPull);
  // A warp a row when it copies them, else a lane a row (the plan only).
  const int64_t warp_rows = copy_rows ? g.n * rows_cap : (g.n * rows_cap + 31) / 32;
  check_cuda(moe::launch_moe_pull(pp, copy_grid(warp_rows, 16, g.sms), g.stream), "MoE layer: pull kernel launch",
             __FILE__, __LINE__);
}

void MoeLayer::Impl::wait_flags(Group& g, int first, MoeWait record) {
  moe::WaitFlagsParams p;
  p.flags = reinterpret_cast<uint64_t* const*>(flags->device_table(w.local_index(g.rank0)));
  p.rank0 = g.rank0, p.n = g.n, p.P = P, p.first = first;
  p.epoch = epoch, p.timeout_ns = timeout_ns(o.timeout_s), p.timeout_record = g.records + record;
  if (record == kWaitCombine) {  // this rank's own rows never come after a failed pull or expert kernel
    static_assert(kWaitPull == 0 && kWaitExperts == 1 && kWaitCombine == 2, "the earlier records come first");
    p.earlier_records = g.records, p.earlier_count = kWaitCombine;
  }
  check_cuda(moe::launch_moe_wait_flags(p, g.stream), "MoE layer: flag wait kernel launch", __FILE__, __LINE__);
}

void MoeLayer::Impl::experts_fused(Group& g, const MoeSchedulePlan& plan, bool remote) {
  const int li = w.local_index(g.rank0);
  moe::FusedLayerParams p;
  p.x_pool = g.pool_x, p.h = g.h, p.w13 = g.w13, p.w2 = g.w2, p.offs = g.offs, p.row_weight = g.row_weight;
  p.row_dest_rank = g.row_dest_rank, p.row_dest_slot = g.row_dest_slot;
  p.rows_cap = int(g.n * rows_cap), p.hidden = H, p.inter = I, p.E_run = g.n * E_loc;
  if (remote) {
    p.combine = combine->device_table(li);
    p.flags = reinterpret_cast<uint64_t* const*>(flags->device_table(li));
    p.done_flag = moe::layer_flag_done(P, 0), p.rank0 = g.rank0, p.local_ranks = g.n, p.world = P;
    p.epoch = epoch;
    p.x_send = x_send->device_table(li), p.T_max = T_max;  // the dispatch's rows copied in the kernel
    p.pull_record = g.records + kWaitPull;
  } else {
    p.out_pool = g.pool_out;  // the floor: every store local, no flags
  }
  p.schedule = fused_schedule(plan);
  if (p.schedule == moe::kScheduleExpertWave) {
    p.wave_tiles = plan.wave_tiles;
  } else {
    p.l2_share = float(plan.l2_share);
    const bool interleaved = plan.schedule == MoeSchedule::interleaved;  // model-guided keeps its lag
    p.lag_tiles = interleaved ? sched::claim_lag_tiles(plan.lag_tiles, g.sms) : plan.lag_tiles;
  }
  p.counters = g.counters;
  p.timeout_ns = timeout_ns(o.timeout_s), p.timeout_record = g.records + kWaitExperts;
  moe::FusedTrace trace;
  if (tracing) {
    XSTAGE_CUDA(cudaMemsetAsync(g.trace, 0, 2 * size_t(g.trace_tiles) * 4 * sizeof(uint64_t), g.stream));
    trace.buf = g.trace, trace.tiles = int(std::min<int64_t>(g.trace_tiles, INT32_MAX));
  }
  check_cuda(moe::launch_fused_layer(p, fused_tile_id(tile), g.stream, tracing ? &trace : nullptr),
             fmt::format("MoE layer: fused expert kernel launch (ranks {} .. {}, tile {})", g.rank0, g.rank0 + g.n - 1,
                         to_string(tile))
                 .c_str(),
             __FILE__, __LINE__);
}

void MoeLayer::Impl::experts_unfused(Group& g) {
  // The grouped GEMMs with the fused kernel's tile and one split: the same
  // accumulation order, so the same bf16 values.
  const int rows = int(g.n * rows_cap), E_run = g.n * E_loc;
  MoeGemmArgs l1{MoeGemmKind::l1_swiglu, g.pool_x, g.w13, g.h, g.offs, g.row_weight, rows, H, 2 * I, E_run, tile, 1};
  l1.out_store = MoeOutStore::warp_staged;
  moe_gemm(l1, g.stream);
  MoeGemmArgs l2{MoeGemmKind::l2, g.h, g.w2, g.pool_out, g.offs, nullptr, rows, I, H, E_run, tile, 1};
  l2.out_store = MoeOutStore::warp_staged;
  moe_gemm(l2, g.stream);
}

// L2's rows in send order (each source's rows one chunk), into pool_x: its
// rows are dead after L1, and the pools are the layer's largest buffers.
void MoeLayer::Impl::permute_unfused(Group& g) {
  const int rows = int(g.n * rows_cap), E_run = g.n * E_loc;
  moe::PermuteParams pp;
  pp.src = g.pool_out, pp.dst = g.pool_x, pp.row_perm = g.row_perm, pp.offs = g.offs;
  pp.E_run = E_run, pp.H = H, pp.rows = rows;
  check_cuda(moe::launch_moe_permute(pp, copy_grid(rows, 8, g.sms), g.stream), "MoE layer: permute kernel launch",
             __FILE__, __LINE__);
  XSTAGE_CUDA(cudaEventRecord(g.permuted, g.stream));
}

// The baseline's combine all-to-all. Receiver r holds, in send order, the
// rows of every source s (after the rows of the sources before s); they go
// to s's combine buffer, used as flat rows in s's send order, at the rows s
// sent to owners before r (send_base[s][r * E_loc]). Sizes come from the
// counts on the host, as a user's split sizes do.
void MoeLayer::Impl::exchange_unfused() {
  for (Group& g : groups) {
    XSTAGE_CUDA(cudaSetDevice(g.device));
    XSTAGE_CUDA(cudaEventSynchronize(g.counts_ready));
  }
  const size_t row_bytes = size_t(H) * 2;
  auto counts_of = [&](int r) {  // [P][E_loc]: what each source routed to r
    Group& g = group_of(r);
    return g.host_counts + size_t(r - g.rank0) * P * E_loc;
  };
  auto send_base_of = [&](int s) {
    Group& g = group_of(s);
    return g.host_send_base + size_t(s - g.rank0) * (E + 1);
  };
  // Rows receiver r got from source s, and where they start in r's group's pool.
  auto rows_from = [&](int r, int s) {
    const int32_t* c = counts_of(r) + size_t(s) * E_loc;
    int64_t n = 0;
    for (int e = 0; e < E_loc; ++e) n += std::clamp(c[e], 0, T_max);
    return n;
  };
  auto recv_start = [&](int r, int s) {  // in rows of r's group's pool, send order
    Group& g = group_of(r);
    int64_t start = 0;
    for (int r2 = g.rank0; r2 < r; ++r2)
      for (int s2 = 0; s2 < P; ++s2) start += rows_from(r2, s2);
    for (int s2 = 0; s2 < s; ++s2) start += rows_from(r, s2);
    return start;
  };

  if (w.backend() == Backend::nccl) {
    const int r = w.local_ranks().front();
    Group& g = group_of(r);
    std::vector<World::PeerChunk> send(static_cast<size_t>(P)), recv(static_cast<size_t>(P));
    const int32_t* base = send_base_of(r);
    for (int s = 0; s < P; ++s) {
      send[size_t(s)] = {g.pool_x + size_t(recv_start(r, s)) * H, size_t(rows_from(r, s)) * row_bytes};
      const int64_t first = base[size_t(s) * E_loc], last = base[size_t(s + 1) * E_loc];
      recv[size_t(s)] = {static_cast<char*>(combine->ptrs[size_t(r)]) + size_t(first) * row_bytes,
                         size_t(last - first) * row_bytes};
    }
    XSTAGE_CUDA(cudaSetDevice(g.device));
    w.native_send_recv(send, recv);  // on the rank's stream, after its permute
    return;
  }
  // Emulated and peer: the copy engine, each owner's copies on its own stream
  // (emulated ranks' streams share one GPU's copy engines).
  for (int r : w.local_ranks()) {
    Group& g = group_of(r);
    const cudaStream_t st = w.stream(r);
    XSTAGE_CUDA(cudaSetDevice(g.device));
    XSTAGE_CUDA(cudaStreamWaitEvent(st, g.permuted, 0));
    for (int s = 0; s < P; ++s) {
      const int64_t rows = rows_from(r, s);
      if (rows == 0) continue;
      const int64_t at = send_base_of(s)[size_t(r) * E_loc];
      XSTAGE_CUDA(cudaMemcpyAsync(static_cast<char*>(combine->ptrs[size_t(s)]) + size_t(at) * row_bytes,
                                  g.pool_x + size_t(recv_start(r, s)) * H, size_t(rows) * row_bytes, cudaMemcpyDefault,
                                  st));
    }
    XSTAGE_CUDA(cudaEventRecord(copied[size_t(r)], st));
  }
  for (Group& g : groups) {
    XSTAGE_CUDA(cudaSetDevice(g.device));
    for (int r : w.local_ranks()) XSTAGE_CUDA(cudaStreamWaitEvent(g.stream, copied[size_t(r)], 0));
  }
}

void MoeLayer::Impl::combine_rows(Group& g, bool fused) {
  const int li = w.local_index(g.rank0);
  moe::CombineParams p;
  p.combine = combine->device_table(li), p.out = g.out, p.tokens = g.tokens;
  if (!fused) p.topk_ids = g.topk_ids, p.pos = g.pos, p.send_base = g.send_base;
  p.rank0 = g.rank0, p.n = g.n, p.P = P, p.E = E, p.k = k, p.T_max = T_max, p.H = H;
  p.epoch = epoch, p.timeout_ns = timeout_ns(o.timeout_s), p.timeout_record = g.records + kWaitCombine;
  // After a failed wait this rank's rows are another run's: the combine leaves
  // the output as it was (unfused too: its GEMMs and copies ran on them).
  p.earlier_records = g.records, p.earlier_count = kWaitCombine;
  if (fused) wait_flags(g, moe::layer_flag_done(P, 0), kWaitCombine);
  check_cuda(moe::launch_moe_combine(p, g.stream), "MoE layer: combine kernel launch", __FILE__, __LINE__);
}

void MoeLayer::Impl::run(MoeLayerVariant v, const MoeSchedulePlan& plan) {
  // Checked before anything is enqueued: a run either starts whole or not at all.
  if (plan.wave_tiles < 0 || plan.lag_tiles < 0 || !(plan.l2_share >= 0 && plan.l2_share <= 1))
    throw Error(
        fmt::format("MoE layer: schedule plan ({}): expected wave_tiles >= 0, 0 <= l2_share <= 1, "
                    "lag_tiles >= 0; got {}, {}, {}",
                    to_string(plan.schedule), plan.wave_tiles, plan.l2_share, plan.lag_tiles));
  ++epoch;
  for (Group& g : groups) std::fill(std::begin(g.phase_ran), std::end(g.phase_ran), false);
  auto mark = [&](Group& g, int i) { XSTAGE_CUDA(cudaEventRecord(g.phase[size_t(i)], g.stream)); };

  if (v == MoeLayerVariant::compute_only) {
    if (!dispatched || !pool_rows_valid) {
      // The pool must hold the dispatched rows (an unfused run leaves its
      // send-order L2 rows there: other data, and GEMMs draw data-dependent
      // power under the cap); the ranks then wait for each other, so that
      // the next run's routes cannot overwrite what a pull still reads. Not
      // part of the experts phase the floor is taken from.
      for (Group& g : groups) {
        XSTAGE_CUDA(cudaSetDevice(g.device));
        dispatch(g);
      }
      w.barrier();
      dispatched = pool_rows_valid = true;
    }
    for (Group& g : groups) {
      XSTAGE_CUDA(cudaSetDevice(g.device));
      mark(g, 1);
      experts_fused(g, plan, false);
      mark(g, 2);
      g.phase_ran[1] = true;
    }
    traced = tracing;
    return;
  }

  for (Group& g : groups) {
    XSTAGE_CUDA(cudaSetDevice(g.device));
    mark(g, 0);
    dispatch(g, v != MoeLayerVariant::fused);
    mark(g, 1);
    g.phase_ran[0] = g.phase_ran[1] = g.phase_ran[2] = true;
  }
  dispatched = pool_rows_valid = true;
  if (v == MoeLayerVariant::fused) {
    for (Group& g : groups) {
      XSTAGE_CUDA(cudaSetDevice(g.device));
      if (o.test_expert_wait_fails)
        XSTAGE_CUDA(cudaMemsetAsync(&g.records[kWaitExperts].set, 0x01, sizeof(g.records[kWaitExperts].set), g.stream));
      experts_fused(g, plan, true);
      mark(g, 2);
    }
    for (Group& g : groups) {
      XSTAGE_CUDA(cudaSetDevice(g.device));
      combine_rows(g, true);
      mark(g, 3);
    }
    traced = tracing;
    return;
  }
  // unfused: the sizes to the host first (they are final once the pull has
  // waited), so that the GEMMs run while the host waits for them.
  for (Group& g : groups) {
    XSTAGE_CUDA(cudaSetDevice(g.device));
    for (int i = 0; i < g.n; ++i)
      XSTAGE_CUDA(cudaMemcpyAsync(g.host_counts + size_t(i) * P * E_loc, counts->ptrs[size_t(g.rank0 + i)],
                                  size_t(P) * E_loc * sizeof(int32_t), cudaMemcpyDefault, g.stream));
    XSTAGE_CUDA(cudaMemcpyAsync(g.host_send_base, g.send_base, size_t(g.n) * (E + 1) * sizeof(int32_t),
                                cudaMemcpyDeviceToHost, g.stream));
    XSTAGE_CUDA(cudaEventRecord(g.counts_ready, g.stream));
    experts_unfused(g);
    mark(g, 2);
    permute_unfused(g);
  }
  pool_rows_valid = false;  // pool_x now holds L2's rows in send order
  exchange_unfused();
  for (Group& g : groups) {
    XSTAGE_CUDA(cudaSetDevice(g.device));
    combine_rows(g, false);
    mark(g, 3);
  }
}

}  // namespace xstage
