// The one-GPU MoE layer (include/xstage/moe/moe_local_layer.hpp): checks,
// the scratch layout, and the five launches.
#include "xstage/moe/moe_local_layer.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>

#include <fmt/format.h>

#include "device/moe/token_route_params.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/moe/moe.hpp"

namespace xstage {

namespace {

static_assert(kMoeRouteErrorWords * sizeof(int32_t) == sizeof(moe::TokenRouteError));
constexpr size_t kAlign = 256;  // between the scratch arrays: every one 16-byte aligned for the kernels' vectors
size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Where each array sits in the scratch allocation. x_perm is also L2's
// output: L1, which reads it, has finished when L2 (next in the stream) writes.
struct ScratchLayout {
  size_t block_counts = 0, offs = 0, pos = 0, row_weight = 0, x_perm = 0, h = 0, total = 0;
};
ScratchLayout scratch_layout(const MoeLocalLayerArgs& a, int blocks) {
  const size_t rows = size_t(a.T) * size_t(a.k);
  ScratchLayout s;
  size_t at = 0;
  const auto take = [&](size_t bytes) {
    const size_t here = at;
    at += aligned(bytes);
    return here;
  };
  s.block_counts = take(size_t(a.E) * size_t(blocks) * sizeof(int32_t));
  s.offs = take(size_t(a.E) * sizeof(int32_t));
  s.pos = take(rows * sizeof(int32_t));
  s.row_weight = take(rows * sizeof(float));
  s.x_perm = take(rows * size_t(a.H) * 2);
  s.h = take(rows * size_t(a.I) * 2);
  s.total = at;
  return s;
}

MoeGemmArgs gemm_args(const MoeLocalLayerArgs& a, MoeGemmKind kind) {
  MoeGemmArgs g;
  g.kind = kind;
  g.rows_total = a.T * a.k;  // the host's row count: the tile and splits never wait for device counts
  g.E = a.E;
  g.K = kind == MoeGemmKind::l1_swiglu ? a.H : a.I;
  g.N = kind == MoeGemmKind::l1_swiglu ? 2 * a.I : a.H;
  return g;
}

// The GEMMs' arguments for checking sizes alone: their validation also
// wants non-null, aligned pointers, which sizes do not have yet (a stand-in
// address, never dereferenced: nothing is launched with these).
MoeGemmArgs gemm_shape_args(const MoeLocalLayerArgs& a, MoeGemmKind kind) {
  MoeGemmArgs g = gemm_args(a, kind);
  alignas(16) static int32_t stand_in[4] = {};
  g.a = g.b = g.c = stand_in;
  g.offs = stand_in;
  return g;
}

void check_pointer(const void* p, const char* name) {
  if (p == nullptr) throw Error(fmt::format("moe local layer: {}: expected a device pointer, got null", name));
  if ((reinterpret_cast<uintptr_t>(p) & 15u) != 0)
    throw Error(fmt::format("moe local layer: {}: expected a 16-byte aligned pointer, got {}", name, p));
}


// Where the split partials start in a workspace whose first `zeroed` bytes
// are the counts (moe_gemm's layout: 256-byte aligned past them).
size_t partials_at(size_t zeroed) { return (zeroed + 255) / 256 * 256; }
}  // namespace

void validate_moe_local_layer(const MoeLocalLayerArgs& a) {
  if (a.E < 1 || a.E > moe::kTokenRouteMaxExperts)
    throw Error(fmt::format("moe local layer: E (experts) = {}: expected 1 .. {}", a.E, moe::kTokenRouteMaxExperts));
  if (a.k < 1 || a.k > std::min(a.E, moe::kTokenRouteMaxTopk))
    throw Error(fmt::format("moe local layer: k (experts a token) = {}: expected 1 .. {} (at most E = {} and {})", a.k,
                            std::min(a.E, moe::kTokenRouteMaxTopk), a.E, moe::kTokenRouteMaxTopk));
  if (a.T < 0 || int64_t(a.T) * a.k > INT_MAX)
    throw Error(fmt::format("moe local layer: T (tokens) = {} with k = {}: expected T >= 0 and T * k below 2^31", a.T,
                            a.k));
  if (a.I < 1)
    throw Error(fmt::format("moe local layer: I (expert width) = {}: expected >= 1", a.I));
  validate_moe_gemm_args(gemm_shape_args(a, MoeGemmKind::l1_swiglu));  // H: L1's K; 2I: its N
  validate_moe_gemm_args(gemm_shape_args(a, MoeGemmKind::l2));         // I: L2's K; H: its N
  if (a.H % 8 != 0)  // implied by L1's rule today; the route and combine copy 16-byte vectors
    throw Error(fmt::format("moe local layer: H = {}: expected a multiple of 8", a.H));
}

MoeLocalLayerSizes moe_local_layer_sizes(const MoeLocalLayerArgs& a) {
  validate_moe_local_layer(a);
  MoeLocalLayerSizes s;
  s.route_blocks = moe::token_route_blocks(a.T);
  s.scratch_bytes = scratch_layout(a, s.route_blocks).total;
  if (a.T > 0) {
    const MoeGemmArgs l1 = gemm_shape_args(a, MoeGemmKind::l1_swiglu), l2 = gemm_shape_args(a, MoeGemmKind::l2);
    // One workspace for both (they run one after the other): both GEMMs' counts
    // at its start, zeroed, and either's partials past the larger count area.
    s.workspace_zeroed_bytes = std::max(moe_workspace_zeroed_bytes(l1), moe_workspace_zeroed_bytes(l2));
    const size_t at = partials_at(s.workspace_zeroed_bytes);
    const size_t p1 = moe_workspace_bytes(l1), p2 = moe_workspace_bytes(l2);
    const size_t partials = std::max(p1 > 0 ? p1 - partials_at(moe_workspace_zeroed_bytes(l1)) : 0,
                                     p2 > 0 ? p2 - partials_at(moe_workspace_zeroed_bytes(l2)) : 0);
    s.workspace_bytes = p1 > 0 || p2 > 0 ? at + partials : 0;
  }
  return s;
}

void moe_local_layer(const MoeLocalLayerArgs& a, cudaStream_t stream) {
  validate_moe_local_layer(a);
  if (a.T == 0) return;
  // Pointers before the sizes: those ask the device (its SM count picks the GEMMs' tiles).
  check_pointer(a.x, "x");
  check_pointer(a.w13, "w13");
  check_pointer(a.w2, "w2");
  check_pointer(a.topk_ids, "topk_ids");
  check_pointer(a.topk_weights, "topk_weights");
  check_pointer(a.out, "out");
  check_pointer(a.scratch, "scratch");
  if (a.error != nullptr && (reinterpret_cast<uintptr_t>(a.error) & 3u) != 0)
    throw Error(fmt::format("moe local layer: error: expected a 4-byte aligned int32[6], got {}",
                            static_cast<const void*>(a.error)));
  const MoeLocalLayerSizes sizes = moe_local_layer_sizes(a);
  if (a.scratch_bytes < sizes.scratch_bytes)
    throw Error(fmt::format("moe local layer: scratch: {} bytes given, expected at least {} (moe_local_layer_sizes)",
                            a.scratch_bytes, sizes.scratch_bytes));
  if (sizes.workspace_bytes > 0) {
    check_pointer(a.workspace, "workspace");
    if (a.workspace_bytes < sizes.workspace_bytes)
      throw Error(fmt::format("moe local layer: workspace: {} bytes given, expected at least {} (moe_local_layer_sizes)",
                              a.workspace_bytes, sizes.workspace_bytes));
  }

  const ScratchLayout s = scratch_layout(a, sizes.route_blocks);
  char* base = static_cast<char*>(a.scratch);
  moe::TokenRouteParams r;
  r.x = a.x, r.topk_ids = a.topk_ids, r.topk_weights = a.topk_weights;
  r.ids_int64 = a.ids_int64, r.weights_bf16 = a.weights_bf16;
  r.T = a.T, r.H = a.H, r.E = a.E, r.k = a.k, r.blocks = sizes.route_blocks;
  r.block_counts = reinterpret_cast<int32_t*>(base + s.block_counts);
  r.offs = reinterpret_cast<int32_t*>(base + s.offs);
  r.pos = reinterpret_cast<int32_t*>(base + s.pos);
  r.row_weight = reinterpret_cast<float*>(base + s.row_weight);
  r.x_perm = base + s.x_perm;
  r.error = reinterpret_cast<moe::TokenRouteError*>(a.error);
  XSTAGE_CUDA(moe::launch_token_route(r, stream));

  MoeGemmArgs l1 = gemm_args(a, MoeGemmKind::l1_swiglu);
  l1.a = r.x_perm, l1.b = a.w13, l1.c = base + s.h, l1.offs = r.offs, l1.row_weight = r.row_weight;
  l1.workspace = a.workspace, l1.workspace_bytes = a.workspace_bytes;
  l1.workspace_partials_at = partials_at(sizes.workspace_zeroed_bytes);
  moe_gemm(l1, stream);
  MoeGemmArgs l2 = gemm_args(a, MoeGemmKind::l2);
  l2.a = base + s.h, l2.b = a.w2, l2.c = base + s.x_perm, l2.offs = r.offs;  // L2's output over L1's input (see above)
  l2.workspace = a.workspace, l2.workspace_bytes = a.workspace_bytes;
  l2.workspace_partials_at = l1.workspace_partials_at;
  moe_gemm(l2, stream);

  moe::TokenCombineParams c;
  c.y = base + s.x_perm, c.pos = r.pos, c.out = a.out, c.T = a.T, c.H = a.H, c.k = a.k;
  XSTAGE_CUDA(moe::launch_token_combine(c, stream));
}

std::string describe_moe_route_error(const int32_t* rec) {
  if (rec[0] == 0) return "";
  const int kind = rec[1], token = rec[2], slot = rec[3], id = rec[4], E = rec[5];
  if (kind == moe::kTokenRouteIdRepeated)
    return fmt::format("topk_ids[{}, {}] = {} repeats an earlier slot's expert of token {}: expected k distinct "
                       "experts a token (the pair was left out)",
                       token, slot, id, token);
  return fmt::format("topk_ids[{}, {}] = {}: expected an expert id in 0 .. {} (the pair was left out)", token, slot, id,
                     E - 1);
}

}  // namespace xstage
