// The fused MoE layer's time per scheduler, its regime and the model-guided
// plan (include/xstage/moe/moe_prediction.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include <fmt/format.h>

#include "device/sched/claim_policy.hpp"
#include "xstage/core/error.hpp"
#include "xstage/moe/moe_prediction.hpp"

namespace xstage {

namespace {

// The GEMM throughput table (results/h200/moe/moe-gemm.json, docs/design/moe-model.md).
constexpr double kM128NsPerK = 13.0;   // tensor cores, m128n256: median of the runs with >= 256 rows an expert
// m64n256 does half the MMA work a tile; no run of the table is compute-bound
// at that tile (all have one m-block an expert), so this is an estimate:
// 60% of the m128 time for half the work (a warpgroup's m64 wgmma issues at
// the same rate, the loads of B are the same).
constexpr double kM64NsPerK = 7.8;
constexpr double kWeightNsPerK = 16.9;  // a 256 x K bf16 weight slice per tile from HBM, one m-block an expert

// Fixed costs of the layer's kernels outside the fused one (an estimate, not
// measured yet): a dependent kernel's launch gap on a stream.
constexpr double kKernelGapNs = 4000;
// Local HBM traffic (copies into the pool, the combine's reads on the NVLink
// path): the h200-local profile's drain rate, ~4.2 TB/s.
constexpr double kLocalBps = 4.2e12;

int block_m_of(MoeTile t) {
  switch (t) {
    case MoeTile::m128n256: return 128;
    case MoeTile::m64n256: return 64;
    default: throw Error(fmt::format("moe prediction: tile {}; expected m128n256 or m64n256, the tiles the fused kernel runs",
                                     int(t)));
  }
}

// Bounds on what one prediction works through, checked before it starts:
// its work and memory grow with the GEMM tiles it places (about 10 us and
// 100 bytes a tile over the three schedules), so a configuration of more
// than kMaxMoeTiles tiles (~10 s) is refused rather than run for minutes.
// Every recorded sweep and the grid are far below (the grid's
// largest: about 2e5 tiles). The widths keep a tile's columns and the row
// counts in range of an int.
constexpr double kMaxMoeTiles = double(1 << 20);
constexpr int kMaxMoeWidth = 1 << 20, kMaxMoeExperts = 1 << 16;

// An upper bound on the L1 and L2 tiles of a configuration, from its sizes
// alone (no rows spread yet): every pair of token and expert is a row, each
// expert's last m-block may be partial.
double moe_tiles_bound(const MoeConfig& c, int block_m, int block_n) {
  const double pairs = double(c.tokens) * c.P * c.shape.topk;
  const double m_blocks = std::ceil(pairs / block_m) + double(c.shape.experts);
  const double n_blocks = std::ceil(2.0 * c.shape.inter / block_n) + std::ceil(double(c.shape.hidden) / block_n);
  return m_blocks * n_blocks;
}

void check_shape(const MoeShape& s, int tokens, int P, const char* who) {
  // The lower bounds are the layer's own (validate_moe_layer_shape): a tile's last n-block may be partial.
  if (s.hidden < 16 || s.inter < 8 || s.hidden > kMaxMoeWidth || s.inter > kMaxMoeWidth || s.experts < 1 ||
      s.experts > kMaxMoeExperts || s.topk < 1 || s.topk > s.experts)
    throw Error(fmt::format("{}: shape {}/{}/{}/{} (hidden/inter/experts/topk): expected 16 <= hidden <= {}, 8 <= "
                            "inter <= {}, 1 <= experts <= {}, 1 <= topk <= experts",
                            who, s.hidden, s.inter, s.experts, s.topk, kMaxMoeWidth, kMaxMoeWidth, kMaxMoeExperts));
  if (tokens < 1 || tokens > (1 << 24)) throw Error(fmt::format("{}: tokens {}; expected 1 .. 2^24", who, tokens));
  if (P < 1 || P > 1024 || s.experts % P != 0)
    throw Error(fmt::format("{}: P = {}: expected 1 .. 1024 dividing the {} experts", who, P, s.experts));
}

// `total` rows over experts in proportion to `weights`, none above `cap`
// (a token's k experts are distinct: an expert gets at most one row a token).
std::vector<int> spread_rows(long total, const std::vector<double>& weights, long cap) {
  std::vector<int> rows(weights.size(), 0);
  std::vector<bool> full(weights.size(), false);
  long left = total;
  for (int round = 0; round < 64 && left > 0; ++round) {
    double w = 0;
    for (size_t i = 0; i < weights.size(); ++i) w += full[i] ? 0 : weights[i];
    if (!(w > 0)) break;
    long given = 0;
    std::vector<long> add(weights.size(), 0);
    for (size_t i = 0; i < weights.size(); ++i) {
      if (full[i]) continue;
      add[i] = std::min<long>(cap - rows[i], long(std::floor(double(left) * weights[i] / w)));
      given += add[i];
    }
    // What flooring left over, one row at a time to the heaviest experts with room.
    for (size_t i = 0; i < weights.size() && given < left; ++i)
      if (!full[i] && rows[i] + add[i] < cap) {
        ++add[i];
        ++given;
      }
    for (size_t i = 0; i < weights.size(); ++i) {
      rows[i] += int(add[i]);
      full[i] = rows[i] >= cap;
    }
    left -= given;
    if (given == 0) break;
  }
  return rows;
}

// Routing weight of global expert g: uniform, or Zipf(1) over the expert index.
double expert_weight(const std::string& routing, int g) { return routing == "zipf" ? 1.0 / (g + 1) : 1.0; }

// Rows each expert of rank r receives.
std::vector<int> rank_expert_rows(const MoeConfig& c, int r) {
  const int el = c.shape.experts / c.P;
  std::vector<double> w(static_cast<size_t>(el));
  for (int i = 0; i < el; ++i) w[size_t(i)] = expert_weight(c.routing, r * el + i);
  long total = 0;
  if (!c.rows_per_rank.empty()) {
    total = c.rows_per_rank[size_t(r)];
  } else {
    // Expected pairs landing on rank r out of every source's T k.
    double all = 0, mine = 0;
    for (int g = 0; g < c.shape.experts; ++g) {
      all += expert_weight(c.routing, g);
      if (g / el == r) mine += expert_weight(c.routing, g);
    }
    total = long(std::llround(double(c.tokens) * c.P * c.shape.topk * mine / all));
  }
  return spread_rows(total, w, long(c.tokens) * c.P);
}

int resolve_block_m(const MoeConfig& c) {
  if (c.tile != MoeTile::automatic) return block_m_of(c.tile);
  // The layer's rule: m64n256 when <= 64 rows an expert are expected.
  const double expected = double(c.tokens) * c.P * c.shape.topk / c.shape.experts;
  return expected <= 64 ? 64 : 128;
}

MoeSchedulePlan default_plan(MoeSchedule s, const MoeLaunch& l) {
  MoeSchedulePlan plan;
  plan.schedule = s;
  if (s != MoeSchedule::expert_wave) {
    plan.l2_share = 0;  // the kernel's even spread
    plan.lag_tiles = sched::claim_lag_tiles(0, l.sms);
  }
  return plan;
}

// L2 tiles' mean time and mean bytes through the stage, over the launch's tiles.
struct L2Stats {
  double tiles = 0, ns = 0, bytes = 0;
};
L2Stats l2_stats(const MoeLaunch& l) {
  L2Stats s;
  const int nb2 = (l.hidden + l.block_n - 1) / l.block_n;
  for (size_t e = 0; e < l.expert_rows.size(); ++e) {
    const int rows = l.expert_rows[e];
    const int mb = (rows + l.block_m - 1) / l.block_m;
    if (mb == 0) continue;
    s.tiles += double(mb) * nb2;
    s.ns += double(mb) * nb2 * moe_l2_tile_ns(l, int(e));
    s.bytes += double(rows) * l.hidden * 2.0 * l.remote_fraction;
  }
  if (s.tiles > 0) {
    s.ns /= s.tiles;
    s.bytes /= s.tiles;
  }
  return s;
}

}  // namespace

const std::vector<MoeShape>& moe_prediction_shapes() {
  static const std::vector<MoeShape> shapes = {
      {"deepseek-v3", 7168, 2048, 256, 8},   {"deepseek-v4-flash", 4096, 2048, 256, 6},
      {"qwen3-235b", 4096, 1536, 128, 8},    {"qwen3-30b-a3b", 2048, 768, 128, 8},
      {"mixtral-8x7b", 4096, 14336, 8, 2},   {"hidream-i1", 2560, 6912, 4, 2},
  };
  return shapes;
}

MoeShape moe_prediction_shape(const std::string& text) {
  // The layer's names (moe_layer.hpp); moe-gemm's full name of Qwen3-235B too.
  const std::string name = text == "qwen3-235b-a22b" ? "qwen3-235b" : text;
  for (const MoeShape& s : moe_prediction_shapes())
    if (s.name == name) return s;
  MoeShape s;
  s.name = "custom";
  char tail = 0;
  if (std::sscanf(text.c_str(), "%d/%d/%d/%d%c", &s.hidden, &s.inter, &s.experts, &s.topk, &tail) == 4 &&
      s.hidden > 0 && s.inter > 0 && s.experts > 0 && s.topk > 0)
    return s;
  std::string names;
  for (const MoeShape& k : moe_prediction_shapes()) names += (names.empty() ? "" : ", ") + k.name;
  throw Error(fmt::format("MoE shape \"{}\": expected one of {} or hidden/inter/experts/topk (e.g. 4096/1536/128/8)",
                          text, names));
}

double moe_table_tile_ns(int K, int block_m, int m_blocks) {
  if (K < 1 || m_blocks < 1 || (block_m != 128 && block_m != 64))
    throw Error(fmt::format("moe_table_tile_ns: expected K >= 1, BLOCK_M 128 or 64, m-blocks >= 1; got {}, {}, {}", K,
                            block_m, m_blocks));
  const double mma = block_m == 128 ? kM128NsPerK : kM64NsPerK;
  return double(K) * std::max(mma, kWeightNsPerK / m_blocks);
}

namespace {
int m_blocks_of(const MoeLaunch& l, int e) {
  return std::max(1, (l.expert_rows.at(size_t(e)) + l.block_m - 1) / l.block_m);
}
}  // namespace

double moe_l1_tile_ns(const MoeLaunch& l, int e) {
  return l.compute_scale * moe_table_tile_ns(l.hidden, l.block_m, m_blocks_of(l, e));
}
double moe_l2_tile_ns(const MoeLaunch& l, int e) {
  return l.compute_scale * moe_table_tile_ns(l.inter, l.block_m, m_blocks_of(l, e));
}

double moe_rho(const MoeLaunch& l, const Profile& p) {
  const L2Stats s = l2_stats(l);
  if (s.tiles == 0 || !(p.R_Bps > 0) || !(s.bytes > 0) || !(s.ns > 0)) return 0;
  return double(l.sms) * s.bytes / s.ns / (p.R_Bps * 1e-9);
}

MoeRegime moe_classify_regime(const MoeLaunch& l, const Profile& p, int wave_tiles) {
  MoeRegime g;
  g.rho = moe_rho(l, p);
  if (g.rho == 0) {
    g.name = "free";
    return g;
  }
  const double R = p.R_Bps * 1e-9;  // bytes per ns
  // Expert-wave's waves: experts grouped by their first L1 tile index; each
  // wave's L1 and L2 time spread over the G SMs.
  struct Wave {
    double bytes = 0, l1_ns = 0, l2_ns = 0;
  };
  const long W = sched::claim_wave_tiles(wave_tiles, l.sms);
  const int nb1 = (2 * l.inter + l.block_n - 1) / l.block_n, nb2 = (l.hidden + l.block_n - 1) / l.block_n;
  long first = 0, wave = -1;
  std::vector<Wave> waves;
  double all_bytes = 0;
  for (size_t e = 0; e < l.expert_rows.size(); ++e) {
    const int rows = l.expert_rows[e];
    const int mb = (rows + l.block_m - 1) / l.block_m;
    if (mb == 0) continue;
    if (first / W != wave) {
      wave = first / W;
      waves.push_back({});
    }
    const double b = double(rows) * l.hidden * 2.0 * l.remote_fraction;
    waves.back().bytes += b;
    waves.back().l1_ns += double(mb) * nb1 * moe_l1_tile_ns(l, int(e)) / l.sms;
    waves.back().l2_ns += double(mb) * nb2 * moe_l2_tile_ns(l, int(e)) / l.sms;
    all_bytes += b;
    first += long(mb) * nb1;
  }
  // What the stage offers wave w: a stage that drained the previous wave's
  // excess during the L1 tiles between is empty, and offers Q (after a cold
  // start only what the bytes stored so far have given back); one that did
  // not fills only to Q_fill. The burst overflows where the excess is larger.
  double excess = 0, capacity = 0, stored = 0, overflowing = 0;
  for (const Wave& w : waves) {
    g.burst_bytes += w.bytes;
    const double left = std::max(0.0, w.bytes - R * w.l2_ns);
    const double cap = left <= R * w.l1_ns ? p.empty_capacity(stored) : p.fill_capacity();
    excess += left;
    capacity += cap;
    overflowing += left > cap;
    stored += w.bytes;
  }
  const double n = double(waves.size());
  g.burst_bytes /= n;
  g.excess_bytes = excess / n;
  g.capacity_bytes = capacity / n;
  const bool overflow = overflowing > n / 2;
  const double compute = moe_compute_only_ns(l);
  g.mean_rate = compute > 0 ? all_bytes / compute / R : 0;
  if (g.rho <= 1)
    g.name = "free";
  else if (!overflow)
    g.name = "absorbed";
  else
    g.name = g.mean_rate > 1 ? "drain-bound" : "contended";
  return g;
}

std::vector<MoeLaunch> moe_config_launches(const MoeConfig& c) {
  check_shape(c.shape, c.tokens, c.P, "moe prediction");
  if (c.sms < 1) throw Error(fmt::format("moe prediction: SM count {}; expected >= 1", c.sms));
  if (!c.rows_per_rank.empty() && int(c.rows_per_rank.size()) != c.P)
    throw Error(fmt::format("moe prediction: {} rows_per_rank entries; expected one per rank, P = {}", c.rows_per_rank.size(),
                            c.P));
  for (int r : c.rows_per_rank)
    if (r < 0 || long(r) > long(c.tokens) * c.P * c.shape.topk)
      throw Error(fmt::format("moe prediction: a rank received {} rows; expected 0 .. T P k = {}", r,
                              long(c.tokens) * c.P * c.shape.topk));
  MoeLaunch base;
  base.hidden = c.shape.hidden;
  base.inter = c.shape.inter;
  base.block_m = resolve_block_m(c);
  base.sms = c.sms;
  if (const double tiles = moe_tiles_bound(c, base.block_m, base.block_n); tiles > kMaxMoeTiles)
    throw Error(fmt::format("moe prediction: T {} x P {} x top-k {} rows of {}/{}/{}/{} make up to {:.3g} GEMM tiles; "
                            "expected at most {:.3g} (fewer tokens or ranks: a larger configuration would take "
                            "minutes and gigabytes)",
                            c.tokens, c.P, c.shape.topk, c.shape.hidden, c.shape.inter, c.shape.experts, c.shape.topk,
                            tiles, kMaxMoeTiles));
  std::vector<MoeLaunch> out;
  if (c.emulated()) {
    MoeLaunch l = base;
    l.remote_fraction = 1;  // every combine buffer sits in the placement's memory
    l.copy_path_fraction = 1;  // so does every send buffer the kernel reads its rows from
    for (int r = 0; r < c.P; ++r) {
      const std::vector<int> rows = rank_expert_rows(c, r);
      l.expert_rows.insert(l.expert_rows.end(), rows.begin(), rows.end());
    }
    out.push_back(std::move(l));
  } else {
    for (int r = 0; r < c.P; ++r) {
      MoeLaunch l = base;
      l.remote_fraction = double(c.P - 1) / c.P;  // rows of other ranks' tokens
      l.copy_path_fraction = l.remote_fraction;  // read from the other ranks' send buffers
      l.copy_local_fraction = 1.0 / c.P;         // the rank's own tokens
      l.expert_rows = rank_expert_rows(c, r);
      out.push_back(std::move(l));
    }
  }
  return out;
}

std::string moe_default_profile(const MoeConfig& c) {
  if (!c.emulated()) return "h200-peer";
  return c.placement == "device" ? "h200-local" : "h200-host-pcie";
}

MoeConfigPrediction predict_moe_config(const MoeConfig& c, const Profile& profile,
                                       std::optional<double> compute_only_experts_ns) {
  std::vector<MoeLaunch> launches = moe_config_launches(c);
  MoeConfigPrediction out;
  out.block_m = launches.front().block_m;
  // The slowest launch (most rows) sets the experts phase; its compute-only
  // time is the measured one.
  size_t big = 0;
  std::vector<long> rows(launches.size(), 0);
  for (size_t i = 0; i < launches.size(); ++i) {
    rows[i] = std::accumulate(launches[i].expert_rows.begin(), launches[i].expert_rows.end(), 0L);
    if (rows[i] > rows[big]) big = i;
  }
  if (compute_only_experts_ns) {
    const double scale = moe_scale_to_compute_only(launches[big], *compute_only_experts_ns);
    for (MoeLaunch& l : launches) l.compute_scale = scale;
    out.compute_scale = scale;
  }
  out.compute_ns = moe_compute_only_ns(launches[big]);
  out.regime = moe_classify_regime(launches[big], profile);

  // Dispatch (the fused variant): route and plan only; the fused kernel
  // copies the rows (moe_rows_ready_ns). The route stores each pair's token
  // slot and weight (8 bytes) into its owner's routes and the pull reads them
  // back: through the path where the routes sit there (emulated: the
  // placement's memory; one rank a GPU: the route's stores cross for (P-1)/P
  // of the pairs, the pull reads its own memory), plus the plan's local
  // writes (per row 16 bytes of destination and weight, per pair 12 bytes of
  // id, weight and position). Combine: each token's k rows read from the
  // combine buffer (the path's memory when emulated, local memory otherwise)
  // and the output written locally.
  const double row = double(c.shape.hidden) * 2;
  const double R = profile.R_Bps;
  constexpr double kRouteBytes = 8, kPlanLocalBytes = 16 + 12;
  double dispatch = 0, combine = 0;
  if (c.emulated()) {
    const double all = double(rows[0]) * row;
    out.bytes_dispatch = all;
    out.bytes_combine = all;
    const double pairs = double(rows[0]);
    dispatch = 2 * pairs * kRouteBytes / R + pairs * kPlanLocalBytes / kLocalBps;
    combine = all / R + double(c.tokens) * c.P * row / kLocalBps;
  } else {
    for (size_t i = 0; i < launches.size(); ++i) {
      const double pairs = double(rows[i]), crossing = pairs * double(c.P - 1) / c.P;
      out.bytes_dispatch = std::max(out.bytes_dispatch, crossing * row);
      dispatch = std::max(dispatch, crossing * kRouteBytes / R + pairs * (kRouteBytes + kPlanLocalBytes) / kLocalBps);
    }
    out.bytes_combine = double(c.tokens) * c.shape.topk * row;
    combine = (out.bytes_combine + double(c.tokens) * row) / kLocalBps;
  }
  // The dispatch's kernels (route, flag wait, plan, pull) and the counts'
  // flag exchange; the combine's (flag wait, sum) and the done flags'.
  const double dispatch_ns = dispatch * 1e9 + 4 * kKernelGapNs + profile.latency_ns;
  const double combine_ns = combine * 1e9 + 2 * kKernelGapNs + profile.latency_ns;

  for (MoeSchedule s : {MoeSchedule::expert_wave, MoeSchedule::interleaved, MoeSchedule::model_guided}) {
    MoeLayerPrediction p;
    auto it = c.plans.find(s);
    std::optional<MoeSchedulePlan> given;
    if (it != c.plans.end())
      given = it->second;
    else if (s == MoeSchedule::model_guided)
      given = moe_plan_for_config(c, profile);
    for (size_t i = 0; i < launches.size(); ++i) {
      MoeSchedulePlan plan = given ? *given : default_plan(s, launches[i]);
      // As the layer runs it (moe_layer_run.cpp): interleaved with lag 0 waits the grid's SM count.
      if (plan.schedule == MoeSchedule::interleaved && plan.lag_tiles == 0)
        plan.lag_tiles = sched::claim_lag_tiles(0, launches[i].sms);
      const MoeExpertsPrediction e = moe_predict_experts(launches[i], plan, profile);
      if (i == 0 || e.experts_ns > p.experts_ns) {
        p.experts_ns = e.experts_ns;
        p.stalled_ns = e.stalled_ns;
        p.rows_wait_ns = e.rows_wait_ns;
        p.plan = plan;
      }
      out.bytes_stored = std::max(out.bytes_stored, e.store_bytes);
    }
    p.dispatch_ns = dispatch_ns;
    p.combine_ns = combine_ns;
    out.schedulers[s] = p;
  }
  return out;
}

}  // namespace xstage
