// The fused MoE layer for one rank on caller-owned buffers
// (include/xstage/moe/moe_layer_rank.hpp): the areas' places, the plan, and
// one run through the launch sequence MoeLayer uses (moe_layer_launch.hpp).
#include "xstage/moe/moe_layer_rank.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "device/moe/fused_layer_launch.hpp"
#include "device/moe/layer_comm_launch.hpp"
#include "runtime/moe/moe_device_ids.hpp"
#include "runtime/moe/moe_layer_launch.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/model/profile.hpp"
#include "xstage/moe/moe_prediction.hpp"

namespace xstage {

namespace {

constexpr size_t kAlign = 256;  // every area: TMA and 16-byte vector loads need far less
constexpr double kMaxTimeoutS = 86400;

// Every area of both allocations, in bytes from their starts.
struct Places {
  MoeRankLayout pub;
  // the workspace's row_meta block, area by area
  size_t row_weight = 0, row_dest_rank = 0, row_dest_slot = 0, row_perm = 0, offs = 0, pos = 0, send_base = 0;
  size_t tokens = 0, route_done = 0, pull_plan = 0, counters = 0, input_error = 0;
};

struct Cursor {
  size_t at = 0;
  size_t take(size_t bytes) {
    const size_t start = at;
    at = (at + std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
    return start;
  }
};

Places places_of(const MoeLayerOptions& o, int P) {
  const MoeLayerSizes z = moe_layer_sizes(o, P);  // validates
  const size_t E_loc = size_t(o.shape.experts / P), rows = size_t(z.rows_cap);
  const size_t pairs = size_t(o.tokens_max) * size_t(o.shape.topk);
  if (moe::moe_pull_smem_bytes(1, P, int(E_loc)) > moe::moe_pull_max_smem_bytes())
    throw Error(fmt::format("MoE layer (rank): the dispatch plan of {} sources x {} experts a rank takes {} bytes of "
                            "shared memory, above the {} a CTA gets; expected fewer ranks or experts",
                            P, E_loc, moe::moe_pull_smem_bytes(1, P, int(E_loc)), moe::moe_pull_max_smem_bytes()));
  Places p;
  MoeRankLayout& l = p.pub;
  l.tile = moe_layer_tile(o, P);
  l.rows_cap = z.rows_cap;
  Cursor sym;
  l.x_send = sym.take(z.x_send);
  l.routes = sym.take(z.routes);
  l.counts = sym.take(z.counts);
  l.combine = sym.take(z.combine);
  l.flags = sym.take(z.flags);
  l.symmetric_bytes = sym.at;

  Cursor ws;
  l.pool_x = ws.take(z.pool_x);
  l.pool_h = ws.take(z.pool_h);
  l.row_meta = ws.at;
  p.row_weight = ws.take(rows * sizeof(float));
  p.row_dest_rank = ws.take(rows * sizeof(int32_t));
  p.row_dest_slot = ws.take(rows * sizeof(int32_t));
  p.row_perm = ws.take(rows * sizeof(int32_t));
  p.offs = ws.take(E_loc * sizeof(int32_t));
  p.pos = ws.take(pairs * sizeof(int32_t));
  p.send_base = ws.take((size_t(o.shape.experts) + 1) * sizeof(int32_t));
  p.tokens = ws.take(sizeof(int32_t));
  p.route_done = ws.take(sizeof(int32_t));
  p.pull_plan = ws.take(2 * (E_loc * size_t(P) + 1) * sizeof(int32_t));
  p.counters = ws.take(size_t(moe::fused_layer_counter_ints(int(E_loc), z.rows_cap)) * sizeof(int32_t));
  l.topk_ids = ws.take(pairs * sizeof(int32_t));
  l.topk_weights = ws.take(pairs * sizeof(float));
  // The records in one block, so that the caller reads them back in one copy.
  l.records = ws.at;
  l.records_bytes = kWaitCount * sizeof(remote::FlagTimeoutRecord) + sizeof(moe::RouteInputError);
  p.input_error = l.records + kWaitCount * sizeof(remote::FlagTimeoutRecord);
  static_assert(sizeof(remote::FlagTimeoutRecord) % alignof(moe::RouteInputError) == 0);
  ws.take(l.records_bytes);
  l.epoch = ws.take(sizeof(uint64_t));
  l.workspace_bytes = ws.at;
  l.weight_bytes = z.weights;
  return p;
}

template <class T>
T* at(void* base, size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + offset);
}

void check_pointer(const char* name, const void* p) {
  if (p == nullptr) throw Error(fmt::format("MoE layer (rank): {}: expected a device pointer, got null", name));
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
    throw Error(fmt::format("MoE layer (rank): {}: expected a 16-byte aligned pointer, got {}", name, p));
}

}  // namespace

MoeRankLayout moe_rank_layout(const MoeLayerOptions& o, int P) { return places_of(o, P).pub; }

void moe_rank_prepare(const MoeLayerOptions& o, int P) {
  const MoeRankLayout l = moe_rank_layout(o, P);
  int device = 0;
  XSTAGE_CUDA(cudaGetDevice(&device));
  const DeviceInfo d = device_info(device);
  if (d.cc_major != 9 || d.cc_minor != 0)
    throw Error(fmt::format("MoE layer (rank): GPU {} ({}) is sm_{}{}; expected sm_90 (Hopper: the fused kernel "
                            "uses wgmma and TMA)",
                            device, d.name, d.cc_major, d.cc_minor));
  check_cuda(moe::preload_moe_layer_comm_kernels(), "MoE layer (rank): loading the dispatch and combine kernels",
             __FILE__, __LINE__);
  check_cuda(moe::preload_fused_layer(fused_tile_id(l.tile)), "MoE layer (rank): loading the fused expert kernel",
             __FILE__, __LINE__);
}

MoeSchedulePlan moe_rank_plan(const MoeLayerOptions& o, int P, int T, MoeSchedule schedule,
                              const std::string& profile, int sms) {
  const MoeTile tile = moe_layer_tile(o, P);  // validates
  if (T < 0 || T > o.tokens_max)
    throw Error(fmt::format("MoE layer (rank): plan for T = {} tokens: expected 0 .. T_max = {}", T, o.tokens_max));
  if (sms < 1) throw Error(fmt::format("MoE layer (rank): plan: SM count {}: expected >= 1", sms));
  MoeSchedulePlan plan;
  plan.schedule = plan.runs_as = schedule;
  if (schedule != MoeSchedule::model_guided) return plan;  // MoeLayer's defaults: 2 x grid waves, lag = grid
  const Profile prof = load_profile(profile.empty() ? "h200-peer" : profile);
  // A plan needs rows to place; an empty run takes the plan of one token.
  plan = moe_plan_schedule(o.shape, std::max(T, 1), P, sms, tile, prof);
  plan.runs_as = plan.schedule;  // expert-wave or interleaved, run as chosen
  plan.schedule = MoeSchedule::model_guided;
  return plan;
}

void moe_rank_forward(const MoeRankArgs& a, cudaStream_t stream) {
  const MoeLayerOptions& o = a.options;
  const Places pl = places_of(o, a.P);  // validates the options
  const MoeRankLayout& l = pl.pub;
  if (a.rank < 0 || a.rank >= a.P)
    throw Error(fmt::format("MoE layer (rank): rank {}: expected 0 .. P - 1 = {}", a.rank, a.P - 1));
  if (a.T < 0 || a.T > o.tokens_max)
    throw Error(fmt::format("MoE layer (rank {}): T = {} tokens: expected 0 .. T_max = {} (the buffers are sized "
                            "for T_max)",
                            a.rank, a.T, o.tokens_max));
  if (!(o.timeout_s > 0 && o.timeout_s <= kMaxTimeoutS))
    throw Error(fmt::format("MoE layer (rank): timeout {} s: expected > 0 and at most {}", o.timeout_s, kMaxTimeoutS));
  check_pointer("tables", a.tables);
  check_pointer("workspace", a.workspace);
  check_pointer("w13", a.w13);
  check_pointer("w2", a.w2);
  check_pointer("out", a.out);
  if (a.workspace_bytes < l.workspace_bytes)
    throw Error(fmt::format("MoE layer (rank {}): workspace of {} bytes: expected at least {} (moe_rank_layout)",
                            a.rank, a.workspace_bytes, l.workspace_bytes));
  check_moe_schedule_plan(a.plan);
  int sms = a.sms;
  if (sms <= 0) {
    int device = 0;
    XSTAGE_CUDA(cudaGetDevice(&device));
    XSTAGE_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  }

  const int P = a.P;
  MoeLayerLaunch m;
  m.rank0 = a.rank, m.n = 1, m.P = P, m.E = o.shape.experts, m.E_loc = o.shape.experts / P, m.k = o.shape.topk;
  m.H = o.shape.hidden, m.I = o.shape.inter, m.T_max = o.tokens_max;
  m.rows_cap = l.rows_cap, m.tile = l.tile, m.sms = sms, m.timeout_ns = uint64_t(o.timeout_s * 1e9);
  m.x_send = a.tables + size_t(kAreaXSend) * P;
  m.routes = a.tables + size_t(kAreaRoutes) * P;
  m.counts = a.tables + size_t(kAreaCounts) * P;
  m.combine = a.tables + size_t(kAreaCombine) * P;
  m.flags = reinterpret_cast<uint64_t* const*>(a.tables + size_t(kAreaFlags) * P);
  void* ws = a.workspace;
  m.w13 = a.w13, m.w2 = a.w2, m.out = a.out;
  m.pool_x = at<char>(ws, l.pool_x), m.h = at<char>(ws, l.pool_h);
  m.row_weight = at<float>(ws, pl.row_weight);
  m.row_dest_rank = at<int32_t>(ws, pl.row_dest_rank), m.row_dest_slot = at<int32_t>(ws, pl.row_dest_slot);
  m.row_perm = at<int32_t>(ws, pl.row_perm), m.offs = at<int32_t>(ws, pl.offs);
  m.topk_ids = at<int32_t>(ws, l.topk_ids), m.topk_weights = at<float>(ws, l.topk_weights);
  m.pos = at<int32_t>(ws, pl.pos), m.send_base = at<int32_t>(ws, pl.send_base);
  m.tokens = at<int32_t>(ws, pl.tokens), m.route_done = at<int32_t>(ws, pl.route_done);
  m.pull_plan = at<int32_t>(ws, pl.pull_plan), m.counters = at<int32_t>(ws, pl.counters);
  m.records = at<remote::FlagTimeoutRecord>(ws, l.records);
  m.input_error = at<moe::RouteInputError>(ws, pl.input_error);
  uint64_t* epoch = at<uint64_t>(ws, l.epoch);
  m.epoch_at = epoch;

  // T and the epoch from the stream (a graph replay runs them again), then
  // MoeLayer's fused sequence: dispatch (plan only), experts, combine.
  moe::RunBeginParams begin;
  begin.epoch = epoch, begin.tokens = m.tokens, begin.T = a.T;
  check_cuda(moe::launch_moe_run_begin(begin, stream), "MoE layer (rank): run-begin kernel launch", __FILE__,
             __LINE__);
  enqueue_moe_dispatch(m, 0, /*copy_rows=*/false, /*counts_one_behind=*/false, stream);
  enqueue_moe_experts_fused(m, 0, a.plan, /*remote=*/true, nullptr, stream);
  enqueue_moe_combine(m, 0, /*fused=*/true, stream);
}

std::string moe_rank_describe_records(const void* host_records, int P, int rank, int E) {
  remote::FlagTimeoutRecord rec[kWaitCount];
  moe::RouteInputError input;
  std::memcpy(rec, host_records, sizeof rec);
  std::memcpy(&input, static_cast<const char*>(host_records) + sizeof rec, sizeof input);
  return describe_moe_records(P, rank, 1, E, rec, input);
}

}  // namespace xstage
