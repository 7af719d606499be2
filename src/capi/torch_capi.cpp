// C entry points of libxstage_torch.so, which python/xstage loads with ctypes:
// torch owns the tensors, the streams and the peers (symmetric memory); we
// validate and launch into them. Plain C types only, so the library needs no
// torch or Python headers and one build serves every torch and Python version.
// Every function returns 0 on success, or 1 with a one-line message in `err`
// (nothing throws across this boundary).
#include <cstdint>
#include <cstdio>
#include <climits>
#include <exception>
#include <string>

#include <cuda_runtime_api.h>

#include "xstage/attention/attention.hpp"
#include "xstage/comm/remote_store.hpp"
#include "xstage/core/error.hpp"
#include "xstage/moe/moe.hpp"
#include "xstage/moe/moe_layer.hpp"
#include "xstage/moe/moe_layer_rank.hpp"
#include "xstage/moe/moe_local_layer.hpp"
#include "xstage/ulysses/ulysses.hpp"
#include "xstage/ulysses/ulysses_fused.hpp"

namespace {

// Runs f; a thrown exception becomes return value 1 and its message in err.
template <class F>
int guarded(char* err, int err_len, F&& f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    if (err != nullptr && err_len > 0) std::snprintf(err, size_t(err_len), "%s", e.what());
  } catch (...) {
    if (err != nullptr && err_len > 0) std::snprintf(err, size_t(err_len), "%s", "unknown C++ exception");
  }
  return 1;
}

// A record's description into msg: 1 when the record holds something, else
// 0. Like guarded, no exception crosses the C boundary: one thrown while
// describing (formatting, memory) becomes the description.
template <class F>
int describe(char* msg, int msg_len, F&& f) {
  std::string m;
  try {
    m = f();
  } catch (const std::exception& e) {
    m = std::string("the record could not be described: ") + e.what();
  } catch (...) {
    m = "the record could not be described: unknown C++ exception";
  }
  if (m.empty()) return 0;
  if (msg != nullptr && msg_len > 0) std::snprintf(msg, size_t(msg_len), "%s", m.c_str());
  return 1;
}

// A value from the caller that must lie in [lo, hi]: an enum's or an int's
// range, checked before it is cast (a cast of anything else is not a value).
int64_t in_range(int64_t v, int64_t lo, int64_t hi, const char* what) {
  if (v < lo || v > hi)
    throw xstage::Error(std::string(what) + ": expected " + std::to_string(lo) + " .. " + std::to_string(hi) +
                        ", got " + std::to_string(v));
  return v;
}
constexpr int kLastKernel = int(xstage::AttentionKernel::wgmma_m192_overlap);
constexpr int kLastStorePath = int(xstage::StorePath::paced_warp);
constexpr int kLastCompletion = int(xstage::Completion::coupled);

// shape: int64[7] = P, rank, B, S, H, D, kernel (an xstage::AttentionKernel value).
xstage::UlyssesFusedShape fused_shape(const int64_t* shape) {
  // Only what the narrowing to int needs: the library's validation says what P and rank must be.
  return {int(in_range(shape[0], INT32_MIN, INT32_MAX, "ulysses: P")),
          int(in_range(shape[1], INT32_MIN, INT32_MAX, "ulysses: rank")), shape[2], shape[3], shape[4], shape[5]};
}
xstage::AttentionKernel fused_kernel(const int64_t* shape) {
  return xstage::AttentionKernel(in_range(shape[6], 0, kLastKernel, "ulysses: kernel"));
}

// The sizes of a MoE GEMM, narrowed to the library's ints after a range check
// (the library's validation says what each must be).
xstage::MoeGemmArgs moe_args(int kind, int64_t rows_total, int64_t K, int64_t N, int64_t E) {
  xstage::MoeGemmArgs a;
  a.kind = xstage::MoeGemmKind(in_range(kind, 0, 1, "moe gemm: kind (0 L1, 1 L2)"));
  a.rows_total = int(in_range(rows_total, 0, INT32_MAX, "moe gemm: rows"));
  a.K = int(in_range(K, INT32_MIN, INT32_MAX, "moe gemm: K"));
  a.N = int(in_range(N, INT32_MIN, INT32_MAX, "moe gemm: N"));
  a.E = int(in_range(E, INT32_MIN, INT32_MAX, "moe gemm: E"));
  return a;
}

// The one-GPU MoE layer's sizes: int64[5] = T, H, I, E, k, narrowed after a
// range check; flags: bit 0 ids int64, bit 1 weights bf16.
xstage::MoeLocalLayerArgs local_layer_args(const int64_t* dims, int flags) {
  xstage::MoeLocalLayerArgs a;
  a.T = int(in_range(dims[0], 0, INT32_MAX, "moe layer: T"));
  a.H = int(in_range(dims[1], INT32_MIN, INT32_MAX, "moe layer: H"));
  a.I = int(in_range(dims[2], INT32_MIN, INT32_MAX, "moe layer: I"));
  a.E = int(in_range(dims[3], INT32_MIN, INT32_MAX, "moe layer: E"));
  a.k = int(in_range(dims[4], INT32_MIN, INT32_MAX, "moe layer: k"));
  in_range(flags, 0, 3, "moe layer: flags (bit 0 ids int64, bit 1 weights bf16)");
  a.ids_int64 = (flags & 1) != 0;
  a.weights_bf16 = (flags & 2) != 0;
  return a;
}

// The expert-parallel layer's options: dims int64[7] = T_max, H, I, E, k, P,
// tile (-1 automatic, 0 m128n256, 1 m64n256), narrowed after a range check
// (the library's validation says what each must be). P is returned apart.
xstage::MoeLayerOptions ep_options(const int64_t* dims, double timeout_s, int* P) {
  xstage::MoeLayerOptions o;
  o.shape.name = "custom";
  o.tokens_max = int(in_range(dims[0], INT32_MIN, INT32_MAX, "moe layer (ep): T_max"));
  o.shape.hidden = int(in_range(dims[1], INT32_MIN, INT32_MAX, "moe layer (ep): H"));
  o.shape.inter = int(in_range(dims[2], INT32_MIN, INT32_MAX, "moe layer (ep): I"));
  o.shape.experts = int(in_range(dims[3], INT32_MIN, INT32_MAX, "moe layer (ep): E"));
  o.shape.topk = int(in_range(dims[4], INT32_MIN, INT32_MAX, "moe layer (ep): k"));
  *P = int(in_range(dims[5], 1, INT32_MAX, "moe layer (ep): P"));
  o.tile = xstage::MoeTile(in_range(dims[6], -1, 1, "moe layer (ep): tile (-1 auto, 0 m128n256, 1 m64n256)"));
  o.timeout_s = timeout_s;
  return o;
}

// A schedule plan as doubles [5] = schedule, runs_as, wave_tiles, l2_share,
// lag_tiles (MoeSchedule values; the tiles whole numbers).
constexpr int kLastSchedule = int(xstage::MoeSchedule::model_guided);
xstage::MoeSchedulePlan plan_from(const double* v) {
  xstage::MoeSchedulePlan p;
  p.schedule = xstage::MoeSchedule(in_range(int64_t(v[0]), 0, kLastSchedule, "moe layer (ep): plan schedule"));
  p.runs_as = xstage::MoeSchedule(in_range(int64_t(v[1]), 0, kLastSchedule, "moe layer (ep): plan runs_as"));
  p.wave_tiles = int(in_range(int64_t(v[2]), 0, INT32_MAX, "moe layer (ep): plan wave_tiles"));
  p.l2_share = v[3];
  p.lag_tiles = int(in_range(int64_t(v[4]), 0, INT32_MAX, "moe layer (ep): plan lag_tiles"));
  return p;
}

}  // namespace

extern "C" {

// Bumped whenever a signature below changes; python/xstage/_lib.py checks it.
int xstage_torch_abi_version() { return 5; }

// O = softmax(scale Q K^T) V, bf16 [B, S, H, D]; strides: int64[12], the (b, s,
// h) element strides of q, k, v and o. scale: NaN for 1/sqrt(D); kernel: an
// xstage::AttentionKernel value (0: the default for D).
int xstage_attention_forward(const void* q, const void* k, const void* v, void* o, int B, int H, int S_q, int S_kv,
                             int D, const int64_t* strides, float scale, int kernel, void* stream, char* err,
                             int err_len) {
  return guarded(err, err_len, [&] {
    xstage::AttentionForwardArgs a;
    a.B = B, a.H = H, a.S_q = S_q, a.S_kv = S_kv, a.D = D, a.scale = scale;
    a.q = q, a.k = k, a.v = v, a.o = o;
    a.q_stride = {strides[0], strides[1], strides[2]};
    a.k_stride = {strides[3], strides[4], strides[5]};
    a.v_stride = {strides[6], strides[7], strides[8]};
    a.o_stride = {strides[9], strides[10], strides[11]};
    a.kernel = xstage::AttentionKernel(in_range(kernel, 0, kLastKernel, "attention: kernel"));
    xstage::attention_forward(a, static_cast<cudaStream_t>(stream));
  });
}

// plan: int64[6] = block_m, m_blocks, chunk, seq_rows, out_elems, flag_slots.
int xstage_ulysses_plan(const int64_t* shape, int64_t* plan, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    const auto p = xstage::plan_ulysses_fused(fused_shape(shape), fused_kernel(shape));
    const int64_t values[6] = {p.block_m, p.m_blocks, p.chunk, p.seq_rows, p.out_elems, p.flag_slots};
    for (int i = 0; i < 6; ++i) plan[i] = values[i];
  });
}

// order: 0 linear, 1 rotated; table: n = P * m_blocks ints.
int xstage_ulysses_tile_order(const int64_t* shape, int order, int* table, int64_t n, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    const auto t = xstage::ulysses_fused_tile_order(
        fused_shape(shape), in_range(order, 0, 1, "ulysses: tile order") == 0 ? xstage::TileOrder::linear
                                                                               : xstage::TileOrder::rotated,
        fused_kernel(shape));
    if (int64_t(t.size()) != n)
      throw xstage::Error("ulysses: tile order: the caller's table holds " + std::to_string(n) + " ints, expected " +
                          std::to_string(t.size()));
    for (size_t i = 0; i < t.size(); ++i) table[i] = t[i];
  });
}

// strides: int64[9], the (b, s, h) element strides of q, k and v; store: -1
// for the default, else an xstage::StorePath value; flags: an
// xstage::Completion value.
int xstage_ulysses_fused(const int64_t* shape, const void* q, const void* k, const void* v, const int64_t* strides,
                         void* const* out_table, uint64_t* const* flag_table, const int* tile_order,
                         void* timeout_record, uint64_t epoch, float scale, int store, int flags, int paced_rows,
                         double timeout_s, void* stream, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    xstage::UlyssesFusedArgs a;
    a.shape = fused_shape(shape);
    a.kernel = fused_kernel(shape);
    a.q = q, a.k = k, a.v = v;
    a.q_stride = {strides[0], strides[1], strides[2]};
    a.k_stride = {strides[3], strides[4], strides[5]};
    a.v_stride = {strides[6], strides[7], strides[8]};
    a.out_table = out_table, a.flag_table = flag_table, a.tile_order = tile_order;
    a.timeout_record = timeout_record;
    a.epoch = epoch, a.scale = scale;
    if (store >= 0) a.store = xstage::StorePath(in_range(store, 0, kLastStorePath, "ulysses: store path"));
    a.flags = xstage::Completion(in_range(flags, 0, kLastCompletion, "ulysses: flags"));
    a.paced_rows = paced_rows, a.timeout_s = timeout_s;
    xstage::ulysses_fused_forward(a, static_cast<cudaStream_t>(stream));
  });
}

// The MoE expert GEMMs (xstage/moe/moe.hpp) with the heuristic's tile, split-K
// and output store. kind: 0 L1 (SwiGLU, W13 interleaved; row_weight
// optional), 1 L2 (row_weight null). a [rows_total, K], b [E, N, K], c
// [rows_total, N / 2 (L1) or N], offs int32 [E], all contiguous device
// memory. workspace: workspace_bytes (xstage_torch_moe_workspace_bytes) of
// device memory when that is above 0, its first `zeroed` bytes zero, each
// launch leaving them so for the next; one launch at a time may use it. (Not libxstage_moe.so's
// xstage_moe_gemm, the bench's entry point, which takes the tile and splits.)
int xstage_torch_moe_gemm(int kind, const void* a, const void* b, void* c, const int32_t* offs, const float* row_weight,
                    int64_t rows_total, int64_t K, int64_t N, int64_t E, void* workspace, int64_t workspace_bytes,
                    void* stream, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    xstage::MoeGemmArgs args = moe_args(kind, rows_total, K, N, E);
    args.a = a, args.b = b, args.c = c, args.offs = offs, args.row_weight = row_weight;
    args.workspace = workspace;
    args.workspace_bytes = size_t(in_range(workspace_bytes, 0, INT64_MAX, "moe gemm: workspace_bytes"));
    xstage::moe_gemm(args, static_cast<cudaStream_t>(stream));
  });
}

// The split workspace xstage_torch_moe_gemm needs for these arguments (0: none)
// and how much of its start must be zero (the split counts); the arguments
// are validated as the launch will validate them.
int xstage_torch_moe_workspace_bytes(int kind, const void* a, const void* b, void* c, const int32_t* offs,
                               int64_t rows_total, int64_t K, int64_t N, int64_t E, int64_t* bytes, int64_t* zeroed,
                               char* err, int err_len) {
  return guarded(err, err_len, [&] {
    xstage::MoeGemmArgs args = moe_args(kind, rows_total, K, N, E);
    args.a = a, args.b = b, args.c = c, args.offs = offs;
    *bytes = int64_t(xstage::moe_workspace_bytes(args));
    *zeroed = int64_t(xstage::moe_workspace_zeroed_bytes(args));
  });
}

// The one-GPU MoE layer (xstage/moe/moe_local_layer.hpp). dims, flags: as
// local_layer_args above. sizes: int64[4] = scratch bytes, split workspace
// bytes (0: none), routing CTAs, the workspace's bytes that must start zeroed.
int xstage_torch_moe_layer_sizes(const int64_t* dims, int flags, int64_t* sizes, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    const xstage::MoeLocalLayerSizes s = xstage::moe_local_layer_sizes(local_layer_args(dims, flags));
    sizes[0] = int64_t(s.scratch_bytes), sizes[1] = int64_t(s.workspace_bytes), sizes[2] = s.route_blocks;
    sizes[3] = int64_t(s.workspace_zeroed_bytes);
  });
}

// x bf16 [T, H], w13 bf16 [E, 2I, H] interleaved, w2 bf16 [E, H, I], topk_ids
// [T, k], topk_weights [T, k], out bf16 [T, H]: contiguous device memory;
// error: int32[6] or null.
int xstage_torch_moe_layer(const int64_t* dims, int flags, const void* x, const void* w13, const void* w2,
                           const void* topk_ids, const void* topk_weights, void* out, void* scratch,
                           int64_t scratch_bytes, void* workspace, int64_t workspace_bytes, int32_t* error,
                           void* stream, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    xstage::MoeLocalLayerArgs a = local_layer_args(dims, flags);
    a.x = x, a.w13 = w13, a.w2 = w2, a.topk_ids = topk_ids, a.topk_weights = topk_weights, a.out = out;
    a.scratch = scratch, a.scratch_bytes = size_t(in_range(scratch_bytes, 0, INT64_MAX, "moe layer: scratch_bytes"));
    a.workspace = workspace;
    a.workspace_bytes = size_t(in_range(workspace_bytes, 0, INT64_MAX, "moe layer: workspace_bytes"));
    a.error = error;
    xstage::moe_local_layer(a, static_cast<cudaStream_t>(stream));
  });
}

// Returns 1 with the message in msg when the routing record (a host copy of
// its int32[6]) holds a bad pair, else 0.
int xstage_torch_moe_describe_route_error(const int32_t* host_record, char* msg, int msg_len) {
  return describe(msg, msg_len, [&] { return xstage::describe_moe_route_error(host_record); });
}

// The expert-parallel layer for one rank on caller-owned buffers
// (xstage/moe/moe_layer_rank.hpp). dims: as ep_options above. layout:
// int64[kEpLayoutLen] = symmetric_bytes, x_send, routes, counts, combine,
// flags (offsets in the symmetric allocation); workspace_bytes, topk_ids,
// topk_weights, records, records_bytes, epoch (offsets in the workspace);
// rows_cap, tile (0 m128n256, 1 m64n256), weight_bytes; the areas' bytes:
// x_send, routes, counts, combine, flags, pool_x, pool_h. CPU only.
constexpr int kEpLayoutLen = 22;
int xstage_torch_moe_ep_layout(const int64_t* dims, double timeout_s, int64_t* layout, int len, char* err,
                               int err_len) {
  return guarded(err, err_len, [&] {
    if (len != kEpLayoutLen)
      throw xstage::Error("moe layer (ep): layout: the caller's array holds " + std::to_string(len) +
                          " int64, expected " + std::to_string(kEpLayoutLen));
    int P = 1;
    const xstage::MoeLayerOptions o = ep_options(dims, timeout_s, &P);
    const xstage::MoeRankLayout l = xstage::moe_rank_layout(o, P);
    const xstage::MoeLayerSizes z = xstage::moe_layer_sizes(o, P);
    const size_t v[kEpLayoutLen] = {l.symmetric_bytes, l.x_send, l.routes, l.counts, l.combine, l.flags,
                                    l.workspace_bytes, l.topk_ids, l.topk_weights, l.records, l.records_bytes,
                                    l.epoch, size_t(l.rows_cap), size_t(l.tile), l.weight_bytes, z.x_send,
                                    z.routes, z.counts, z.combine, z.flags, z.pool_x, z.pool_h};
    for (int i = 0; i < kEpLayoutLen; ++i) layout[i] = int64_t(v[i]);
  });
}

// Loads the kernels on the current device and checks it (once, before the first forward).
int xstage_torch_moe_ep_prepare(const int64_t* dims, double timeout_s, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    int P = 1;
    const xstage::MoeLayerOptions o = ep_options(dims, timeout_s, &P);
    xstage::moe_rank_prepare(o, P);
  });
}

// plan: double[5] (plan_from's order) for T tokens a rank; schedule: a
// MoeSchedule value; profile: an embedded profile's name or a file ("" for
// h200-peer); sms: the GPU's SM count. CPU only.
int xstage_torch_moe_ep_plan(const int64_t* dims, double timeout_s, int64_t T, int schedule, const char* profile,
                             int sms, double* plan, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    int P = 1;
    const xstage::MoeLayerOptions o = ep_options(dims, timeout_s, &P);
    const xstage::MoeSchedulePlan p = xstage::moe_rank_plan(
        o, P, int(in_range(T, 0, INT32_MAX, "moe layer (ep): T")),
        xstage::MoeSchedule(in_range(schedule, 0, kLastSchedule, "moe layer (ep): schedule")),
        profile == nullptr ? "" : profile, sms);
    plan[0] = double(int(p.schedule)), plan[1] = double(int(p.runs_as)), plan[2] = p.wave_tiles;
    plan[3] = p.l2_share, plan[4] = p.lag_tiles;
  });
}

// One run of rank `rank`: tables device [5][P] (x_send, routes, counts,
// combine, flags of every rank); workspace this rank's; w13 bf16 [E/P, 2I,
// H] interleaved, w2 bf16 [E/P, H, I]; out bf16 [T, H]; the tokens, ids and
// weights already in their areas; plan double[5].
int xstage_torch_moe_ep_forward(const int64_t* dims, double timeout_s, int rank, void* const* tables,
                                void* workspace, int64_t workspace_bytes, const void* w13, const void* w2, void* out,
                                int64_t T, const double* plan, int sms, void* stream, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    xstage::MoeRankArgs a;
    a.options = ep_options(dims, timeout_s, &a.P);
    a.rank = int(in_range(rank, 0, INT32_MAX, "moe layer (ep): rank"));
    a.tables = tables, a.workspace = workspace;
    a.workspace_bytes = size_t(in_range(workspace_bytes, 0, INT64_MAX, "moe layer (ep): workspace_bytes"));
    a.w13 = w13, a.w2 = w2, a.out = out;
    a.T = int(in_range(T, 0, INT32_MAX, "moe layer (ep): T"));
    a.plan = plan_from(plan);
    a.sms = sms;
    xstage::moe_rank_forward(a, static_cast<cudaStream_t>(stream));
  });
}

// Returns 1 with the message in msg when the records block (a host copy)
// holds a timed-out wait or a bad routing pair, else 0.
int xstage_torch_moe_ep_describe(const void* host_records, int P, int rank, int E, char* msg, int msg_len) {
  return describe(msg, msg_len, [&] { return xstage::moe_rank_describe_records(host_records, P, rank, E); });
}

int xstage_ulysses_timeout_record_bytes() { return int(xstage::ulysses_timeout_record_bytes()); }

// Returns 1 with the message in msg when the record (a host copy) says a wait timed out, else 0.
int xstage_ulysses_describe_timeout(const void* host_record, char* msg, int msg_len) {
  return describe(msg, msg_len, [&] { return xstage::describe_ulysses_timeout(host_record); });
}

// Names to enum values, with the CLI's words and messages.
int xstage_parse_store_path(const char* name, int* value, char* err, int err_len) {
  return guarded(err, err_len, [&] { *value = int(xstage::parse_store_path(name)); });
}
int xstage_parse_completion(const char* name, int* value, char* err, int err_len) {
  return guarded(err, err_len, [&] { *value = int(xstage::parse_completion(name)); });
}
int xstage_parse_attention_kernel(const char* name, int* value, char* err, int err_len) {
  return guarded(err, err_len, [&] { *value = int(xstage::parse_attention_kernel(name)); });
}

}  // extern "C"
