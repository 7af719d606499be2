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

// Warps of the permute kernel take rows grid-stride: enough CTAs to fill the
// GPU twice over, no more than the rows need (the pull's: moe_layer_launch.cpp).
int copy_grid(int64_t rows, int warps_per_cta, int sms) {
  const int64_t need = (rows + warps_per_cta - 1) / warps_per_cta;
  return int(std::clamp<int64_t>(need, 1, 2 * int64_t(sms)));
}

}  // namespace

MoeLayerLaunch MoeLayer::Impl::launch_of(Group& g) {
  const int li = w.local_index(g.rank0);
  MoeLayerLaunch l;
  l.rank0 = g.rank0, l.n = g.n, l.P = P, l.E = E, l.E_loc = E_loc, l.k = k, l.H = H, l.I = I, l.T_max = T_max;
  l.rows_cap = rows_cap, l.tile = tile, l.sms = g.sms, l.timeout_ns = timeout_ns(o.timeout_s);
  l.x_send = x_send->device_table(li), l.routes = routes->device_table(li), l.counts = counts->device_table(li);
  l.combine = combine->device_table(li);
  l.flags = reinterpret_cast<uint64_t* const*>(flags->device_table(li));
  l.w13 = g.w13, l.w2 = g.w2, l.pool_x = g.pool_x, l.h = g.h, l.pool_out = g.pool_out, l.out = g.out;
  l.offs = g.offs, l.row_dest_rank = g.row_dest_rank, l.row_dest_slot = g.row_dest_slot, l.row_perm = g.row_perm;
  l.row_weight = g.row_weight, l.topk_ids = g.topk_ids, l.topk_weights = g.topk_weights;
  l.pos = g.pos, l.send_base = g.send_base, l.tokens = g.tokens, l.route_done = g.route_done;
  l.pull_plan = g.pull_plan, l.counters = g.counters, l.records = g.records, l.input_error = g.input_error;
  return l;  // the epoch stays the host's (epoch_at null): run() counts it
}

void MoeLayer::Impl::dispatch(Group& g, bool copy_rows) {
  enqueue_moe_dispatch(launch_of(g), epoch, copy_rows, o.test_counts_never_come, g.stream);
}

void MoeLayer::Impl::experts_fused(Group& g, const MoeSchedulePlan& plan, bool remote) {
  moe::FusedTrace trace;
  if (tracing) {
    XSTAGE_CUDA(cudaMemsetAsync(g.trace, 0, 2 * size_t(g.trace_tiles) * 4 * sizeof(uint64_t), g.stream));
    trace.buf = g.trace, trace.tiles = int(std::min<int64_t>(g.trace_tiles, INT32_MAX));
  }
  enqueue_moe_experts_fused(launch_of(g), epoch, plan, remote, tracing ? &trace : nullptr, g.stream);
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
  enqueue_moe_combine(launch_of(g), epoch, fused, g.stream);
}

void MoeLayer::Impl::run(MoeLayerVariant v, const MoeSchedulePlan& plan) {
  // Checked before anything is enqueued: a run either starts whole or not at all.
  check_moe_schedule_plan(plan);
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
