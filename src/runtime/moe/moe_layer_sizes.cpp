// The MoE layer's option checks, tile choice and buffer sizes
// (include/xstage/moe/moe_layer.hpp; layouts: docs/design/moe-layer.md). CPU only.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "device/moe/fused_layer_launch.hpp"
#include "device/moe/layer_comm_params.hpp"
#include "device/remote/flag_timeout_record.hpp"
#include "xstage/core/error.hpp"
#include "xstage/moe/moe_layer.hpp"

namespace xstage {

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
// Longest wait the kernels' nanosecond clocks are asked to count.
constexpr double kMaxTimeoutS = 86400;

int64_t rows_cap_of(const MoeLayerOptions& o, int P) {
  const int64_t e_loc = o.shape.experts / P;
  return int64_t(P) * o.tokens_max * std::min<int64_t>(o.shape.topk, e_loc);
}

}  // namespace

void validate_moe_layer_shape(const MoeShape& s, int P, const std::string& what) {
  if (P < 1) throw Error(fmt::format("{}: ranks P: expected >= 1, got {}", what, P));
  // What the grouped GEMMs take (moe_gemm.hpp): K a multiple of 8 and N of
  // 16, so L1 (K = hidden, N = 2 inter) and L2 (K = inter, N = hidden) need
  // hidden a multiple of 16 and inter of 8; no tile width need divide them.
  if (s.hidden < 16 || s.hidden % 16 != 0)
    throw Error(fmt::format("{}: hidden = {}: expected a positive multiple of 16 (L2's N, as the grouped "
                            "GEMMs and torch._grouped_mm take it)",
                            what, s.hidden));
  if (s.inter < 8 || s.inter % 8 != 0)
    throw Error(fmt::format("{}: inter = {}: expected a positive multiple of 8 (L2's K, 16-byte rows of h; "
                            "L1's N = 2 inter in whole 16-column gate/up groups)",
                            what, s.inter));
  if (s.experts < 1 || s.experts % P != 0)
    throw Error(fmt::format("{}: experts = {}: expected a positive multiple of P = {} (each rank owns E / P experts)",
                            what, s.experts, P));
  if (s.topk < 1 || s.topk > s.experts)
    throw Error(fmt::format("{}: topk = {}: expected 1 .. experts = {} (a token's experts are distinct)", what, s.topk,
                            s.experts));
}

void validate_moe_layer_options(const MoeLayerOptions& o, int P) {
  const MoeShape& s = o.shape;
  const std::string what = fmt::format("MoE layer ({} {}/{}/{}/{}, P = {})", s.name.empty() ? "custom" : s.name,
                                       s.hidden, s.inter, s.experts, s.topk, P);
  validate_moe_layer_shape(s, P, what);
  if (o.tokens_max < 1) throw Error(fmt::format("{}: tokens_max = {}: expected >= 1", what, o.tokens_max));
  if (o.tile != MoeTile::automatic && o.tile != MoeTile::m128n256 && o.tile != MoeTile::m64n256)
    throw Error(fmt::format("{}: tile {}: expected auto, m128n256 or m64n256 (the tiles the fused kernel is built for)",
                            what, to_string(o.tile)));
  if (!(o.timeout_s > 0) || !(o.timeout_s <= kMaxTimeoutS))
    throw Error(fmt::format("{}: timeout = {} s: expected > 0 and at most {} s", what, o.timeout_s, kMaxTimeoutS));
  // Indices the kernels keep in 32 bits: a pair t * k + j and a combine slot
  // j * T_max + t; pool rows (offsets) of all ranks one GPU runs (at most P).
  const int64_t pairs = int64_t(o.tokens_max) * s.topk;
  if (pairs > kInt32Max)
    throw Error(fmt::format("{}: tokens_max x topk = {}: expected at most 2^31 - 1 (32-bit pair and slot indices)",
                            what, pairs));
  const int64_t rows = rows_cap_of(o, P) * P;
  if (rows > kInt32Max)
    throw Error(
        fmt::format("{}: P x rows_cap = {} pool rows: expected at most 2^31 - 1 (32-bit row offsets; fewer "
                    "tokens or ranks)",
                    what, rows));
  if (int64_t(P) * s.experts > kInt32Max / 2)
    throw Error(fmt::format("{}: P x experts = {}: too many (source, expert) segments; expected at most {}", what,
                            int64_t(P) * s.experts, kInt32Max / 2));
}

MoeTile moe_layer_tile(const MoeLayerOptions& o, int P) {
  validate_moe_layer_options(o, P);
  if (o.tile != MoeTile::automatic) return o.tile;
  // Rows an expert receives on average: T_max * k pairs a source over E experts, from P sources.
  const double rows_per_expert = double(o.tokens_max) * o.shape.topk * P / o.shape.experts;
  return rows_per_expert <= 64 ? MoeTile::m64n256 : MoeTile::m128n256;
}

MoeLayerSizes moe_layer_sizes(const MoeLayerOptions& o, int P) {
  const MoeTile tile = moe_layer_tile(o, P);  // validates
  const int block_m = tile == MoeTile::m64n256 ? 64 : 128;
  const MoeShape& s = o.shape;
  const size_t T = size_t(o.tokens_max), H = size_t(s.hidden), I = size_t(s.inter), k = size_t(s.topk);
  const size_t E = size_t(s.experts), E_loc = E / size_t(P), Pz = size_t(P);
  MoeLayerSizes z;
  z.rows_cap = rows_cap_of(o, P);
  const size_t rows = size_t(z.rows_cap);
  z.x_send = T * H * 2;
  z.routes = Pz * E_loc * T * (sizeof(int32_t) + sizeof(float));
  z.counts = Pz * E_loc * sizeof(int32_t);
  z.combine = k * T * H * 2;
  z.flags = size_t(moe::layer_flag_count(P)) * sizeof(uint64_t);
  z.pool_x = rows * H * 2;
  z.pool_h = rows * I * 2;
  z.pool_out = rows * H * 2;
  z.row_meta = rows * 4 * sizeof(int32_t) + T * k * 3 * sizeof(int32_t) + (E_loc + E + 1 + 1) * sizeof(int32_t);
  z.weights = E_loc * (2 * I * H + H * I) * 2;
  // Tiles one GEMM of one rank may have: every expert's rows rounded up to the tile.
  const int64_t tiles = std::max(moe::fused_layer_max_tiles(z.rows_cap, int(E_loc), block_m, 2 * int(I)),
                                 moe::fused_layer_max_tiles(z.rows_cap, int(E_loc), block_m, int(H)));
  z.workspace = moe::fused_layer_counter_ints(int(E_loc), z.rows_cap) * sizeof(int32_t)  // the fused kernel's counters
                + sizeof(int32_t)              // the route kernel's finished CTAs
                + 2 * (E_loc * Pz + 1) * sizeof(int32_t)  // the pull's plan
                + 3 * sizeof(remote::FlagTimeoutRecord) + sizeof(moe::RouteInputError)  // wait records
                + 2 * size_t(tiles) * 4 * sizeof(uint64_t);                             // the trace: [2][tiles][4]
  z.output = T * H * 2;
  return z;
}

}  // namespace xstage
