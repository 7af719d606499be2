// The fused MoE kernel's tile claims as a list schedule, and the launch through
// the X-Stage simulator (include/xstage/moe_prediction.hpp).
#include <algorithm>
#include <cmath>
#include <queue>

#include <fmt/format.h>

#include "xstage/error.hpp"
#include "xstage/model.hpp"
#include "xstage/moe_prediction.hpp"

namespace xstage {

namespace {

// The profile of stores into the GPU's own memory (what the compute-only tile times contain).
constexpr const char* kLocalProfile = "h200-local";

struct TileRef {
  int expert = 0, rows = 0, cols = 0;
};

// Tiles of one GEMM in claim order: expert, n-block, m-block (m fastest).
std::vector<TileRef> gemm_tiles(const MoeLaunch& l, int n_total) {
  std::vector<TileRef> out;
  const int nb = (n_total + l.block_n - 1) / l.block_n;
  for (size_t e = 0; e < l.expert_rows.size(); ++e) {
    const int rows = l.expert_rows[e];
    const int mb = (rows + l.block_m - 1) / l.block_m;
    for (int n = 0; n < nb; ++n)
      for (int m = 0; m < mb; ++m)
        out.push_back({int(e), std::min(l.block_m, rows - m * l.block_m), std::min(l.block_n, n_total - n * l.block_n)});
  }
  return out;
}

void check_launch(const MoeLaunch& l) {
  if (l.hidden < 1 || l.inter < 1 || l.block_m < 1 || l.block_n < 1 || l.sms < 1)
    throw Error(fmt::format("moe launch: expected positive hidden, inter, tile and SM count, got {}, {}, {}x{}, {}",
                            l.hidden, l.inter, l.block_m, l.block_n, l.sms));
  if (l.sms > 65536) throw Error(fmt::format("moe launch: {} SMs; at most 65536 are simulated", l.sms));
  for (int r : l.expert_rows)
    if (r < 0) throw Error(fmt::format("moe launch: an expert has {} rows; expected >= 0", r));
  if (!(l.remote_fraction >= 0 && l.remote_fraction <= 1))
    throw Error(fmt::format("moe launch: remote fraction {} outside [0, 1]", l.remote_fraction));
  if (!(l.compute_scale > 0) || !std::isfinite(l.compute_scale))
    throw Error(fmt::format("moe launch: compute scale must be positive, got {}", l.compute_scale));
}

// What the claim policy sees: the two counters and the work claimed so far.
class Claims {
 public:
  Claims(const MoeLaunch& l, const MoeSchedulePlan& plan, const std::vector<TileRef>& l1,
         const std::vector<TileRef>& l2)
      : plan_(plan), l1_(l1), l2_(l2), k1_(l.hidden), k2_(l.inter), lag_(std::max(0, plan.lag_tiles)) {
    const size_t E = l.expert_rows.size();
    last_l1_.assign(E, -1);
    for (size_t i = 0; i < l1.size(); ++i) last_l1_[size_t(l1[i].expert)] = int(i);
    share_ = plan.l2_share > 0 ? plan.l2_share : moe_natural_l2_share(l);
    if (plan.schedule == MoeSchedule::expert_wave) build_waves(l);
  }

  // 1: claim the next L1 tile, 2: the next L2 tile, 0: nothing left.
  int next() {
    if (plan_.schedule == MoeSchedule::expert_wave) return next_wave();
    const bool l1_left = n1_ < l1_.size(), l2_left = n2_ < l2_.size();
    if (!l1_left) return l2_left ? take(2) : 0;
    if (l2_left && l2_allowed() && w2_ <= share_ * (w1_ + w2_)) return take(2);
    return take(1);
  }
  size_t l1_claimed() const { return n1_; }
  size_t l2_claimed() const { return n2_; }

 private:
  int take(int gemm) {
    if (gemm == 1) {
      ++n1_;
      w1_ += k1_;
    } else {
      ++n2_;
      w2_ += k2_;
    }
    return gemm;
  }
  // Every L1 tile of the next L2 tile's expert claimed, plus lag more (or all L1 claimed).
  bool l2_allowed() const {
    const int last = last_l1_[size_t(l2_[n2_].expert)];
    return n1_ == l1_.size() || long(n1_) >= long(last) + 1 + lag_;
  }
  // Waves: experts whose first L1 tile index lies in [w W, (w+1) W).
  void build_waves(const MoeLaunch& l) {
    const long W = plan_.wave_tiles > 0 ? plan_.wave_tiles : 2L * l.sms;
    long wave = -1;
    size_t i1 = 0, i2 = 0;
    while (i1 < l1_.size()) {
      const int e = l1_[i1].expert;
      const long w = long(i1) / W;
      if (w != wave) {
        wave = w;
        l1_end_.push_back(0);
        l2_end_.push_back(0);
      }
      while (i1 < l1_.size() && l1_[i1].expert == e) ++i1;
      while (i2 < l2_.size() && l2_[i2].expert == e) ++i2;
      l1_end_.back() = i1;
      l2_end_.back() = i2;
    }
  }
  int next_wave() {
    while (wave_ < l1_end_.size()) {
      if (n1_ < l1_end_[wave_]) return take(1);
      if (n2_ < l2_end_[wave_]) return take(2);
      ++wave_;
    }
    return 0;
  }

  const MoeSchedulePlan& plan_;
  const std::vector<TileRef>& l1_;
  const std::vector<TileRef>& l2_;
  const double k1_, k2_;
  const long lag_;
  double share_ = 0;
  std::vector<int> last_l1_;
  std::vector<size_t> l1_end_, l2_end_;
  size_t wave_ = 0, n1_ = 0, n2_ = 0;
  double w1_ = 0, w2_ = 0;
};

}  // namespace

double moe_natural_l2_share(const MoeLaunch& l) {
  double w1 = 0, w2 = 0;
  const int nb1 = (2 * l.inter + l.block_n - 1) / l.block_n, nb2 = (l.hidden + l.block_n - 1) / l.block_n;
  for (int rows : l.expert_rows) {
    const int mb = (rows + l.block_m - 1) / l.block_m;
    w1 += double(mb) * nb1 * l.hidden;
    w2 += double(mb) * nb2 * l.inter;
  }
  return w1 + w2 > 0 ? w2 / (w1 + w2) : 0.0;
}

MoeClaimSchedule moe_claim_schedule(const MoeLaunch& l, const MoeSchedulePlan& plan, const Profile& profile,
                                    const std::vector<double>& store_ns) {
  check_launch(l);
  const std::vector<TileRef> l1 = gemm_tiles(l, 2 * l.inter), l2 = gemm_tiles(l, l.hidden);
  if (!store_ns.empty() && store_ns.size() != l2.size())
    throw Error(fmt::format("moe_claim_schedule: {} store times for {} L2 tiles", store_ns.size(), l2.size()));
  const size_t E = l.expert_rows.size();
  std::vector<double> t1(E), t2(E);
  for (size_t e = 0; e < E; ++e) {
    t1[e] = moe_l1_tile_ns(l, int(e));
    t2[e] = moe_l2_tile_ns(l, int(e));
  }
  std::vector<int> l1_left(E, 0);
  for (const TileRef& t : l1) ++l1_left[size_t(t.expert)];
  std::vector<double> l1_done(E, 0.0);  // latest end of the expert's L1 tiles claimed so far

  MoeClaimSchedule out;
  out.l1_tiles = double(l1.size());
  out.l2_tiles = double(l2.size());
  out.programs.assign(size_t(l.sms), Program{});
  out.sm_l2_tiles.assign(size_t(l.sms), {});
  out.tiles.reserve(l1.size() + l2.size());
  Claims claims(l, plan, l1, l2);
  const Profile* local = find_embedded_profile(kLocalProfile);
  using Free = std::pair<double, int>;  // (time the SM is free, SM)
  std::priority_queue<Free, std::vector<Free>, std::greater<>> free;
  for (int s = 0; s < l.sms; ++s) free.push({0.0, s});
  while (!free.empty()) {
    const auto [t, sm] = free.top();
    free.pop();
    const size_t i1 = claims.l1_claimed(), i2 = claims.l2_claimed();
    const int gemm = claims.next();
    if (gemm == 0) {
      out.makespan_ns = std::max(out.makespan_ns, t);
      continue;
    }
    MoeClaimedTile c;
    c.gemm = gemm;
    c.sm = sm;
    c.claim_ns = t;
    std::vector<Step>& steps = out.programs[size_t(sm)].steps;
    if (gemm == 1) {
      const TileRef& r = l1[i1];
      c.index = int(i1);
      c.expert = r.expert;
      c.rows = r.rows;
      c.start_ns = t;
      c.end_ns = t + t1[size_t(r.expert)];
      l1_done[size_t(r.expert)] = std::max(l1_done[size_t(r.expert)], c.end_ns);
      --l1_left[size_t(r.expert)];
      steps.push_back(Step::compute(t1[size_t(r.expert)]));
    } else {
      const TileRef& r = l2[i2];
      // The claim rules leave no L2 tile whose expert has an unclaimed L1 tile.
      if (l1_left[size_t(r.expert)] != 0)
        throw Error(fmt::format("moe_claim_schedule: L2 tile {} claimed before its expert's L1 tiles", i2));
      c.index = int(i2);
      c.expert = r.expert;
      c.rows = r.rows;
      c.start_ns = std::max(t, l1_done[size_t(r.expert)]);
      c.store_bytes = double(r.rows) * r.cols * 2.0 * l.remote_fraction;
      const double store = c.store_bytes <= 0 ? 0.0
                           : store_ns.empty() ? t0_iss_ns(profile, 1, c.store_bytes)
                                              : store_ns[i2];
      // The tile times (measured compute-only, or the GEMM table) contain the
      // tile's store into the GPU's own memory; the rows that go through the
      // stage instead leave that store's T0 out (the stage adds their own).
      const double local_t0 = c.store_bytes > 0 && local ? t0_iss_ns(*local, 1, c.store_bytes) : 0.0;
      const double compute = std::max(0.0, t2[size_t(r.expert)] - local_t0);
      c.end_ns = c.start_ns + compute + store;
      if (c.start_ns > t) steps.push_back(Step::compute(c.start_ns - t));
      steps.push_back(Step::compute(compute));
      if (c.store_bytes > 0) {
        steps.push_back(Step::store(c.store_bytes));
        out.sm_l2_tiles[size_t(sm)].push_back(int(out.tiles.size()));
      }
    }
    out.tiles.push_back(c);
    free.push({c.end_ns, sm});
  }
  return out;
}

double moe_compute_only_ns(const MoeLaunch& launch) {
  MoeLaunch local = launch;
  local.remote_fraction = 0;
  MoeSchedulePlan plan;
  plan.schedule = MoeSchedule::interleaved;
  plan.lag_tiles = launch.sms;
  Profile none;  // no store is issued
  return moe_claim_schedule(local, plan, none).makespan_ns;
}

double moe_scale_to_compute_only(const MoeLaunch& launch, double measured_ns) {
  if (!(measured_ns > 0) || !std::isfinite(measured_ns))
    throw Error(fmt::format("moe compute-only time must be positive, got {} ns", measured_ns));
  MoeLaunch unit = launch;
  unit.compute_scale = 1;
  const double table = moe_compute_only_ns(unit);
  if (!(table > 0)) throw Error("moe compute-only time: the launch has no tiles to scale");
  return measured_ns / table;
}

MoeExpertsPrediction moe_predict_experts(const MoeLaunch& l, const MoeSchedulePlan& plan, const Profile& profile) {
  MoeExpertsPrediction out;
  out.compute_ns = moe_compute_only_ns(l);
  const StageConfig stage = stage_from_profile(profile);
  std::vector<double> store_ns;
  double last = -1;
  SimResult sim;
  MoeClaimSchedule cs;
  // The claim order depends on when SMs come free, which depends on their
  // stalls: alternate the list schedule and the stage until they agree.
  for (int it = 1; it <= 8; ++it) {
    cs = moe_claim_schedule(l, plan, profile, store_ns);
    out.iterations = it;
    double l2_count = cs.l2_tiles;
    if (l2_count == 0 || l.remote_fraction <= 0) {
      sim = SimResult{};
      sim.total_ns = cs.makespan_ns;
      break;
    }
    std::vector<double> next(size_t(l2_count), 0.0);
    SimObserver obs;
    obs.on_burst = [&](const BurstSpan& b) {
      const int tile = cs.sm_l2_tiles[size_t(b.producer)][size_t(b.index)];
      next[size_t(cs.tiles[size_t(tile)].index)] = b.issue_ns();
    };
    sim = simulate(stage, cs.programs, obs);
    store_ns = std::move(next);
    if (last > 0 && std::abs(sim.total_ns - last) <= 0.002 * last) break;
    last = sim.total_ns;
  }
  double bytes = 0;
  for (const MoeClaimedTile& t : cs.tiles) bytes += t.store_bytes;
  out.store_bytes = bytes;
  // The combine learns of the last row from a flag stored after a fence that
  // waits for the drain: two store-to-visibility latencies past the drain.
  const double latency = bytes > 0 ? profile.latency_ns : 0.0;
  out.experts_ns = std::max(sim.total_ns, sim.drained_ns) + 2 * latency;
  out.stalled_ns = sim.stalled_ns;
  out.max_occupancy = sim.max_occupancy;
  return out;
}

}  // namespace xstage
