// The fused MoE kernel's tile claims as a list schedule, and the launch through
// the X-Stage simulator (include/xstage/moe/moe_prediction.hpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>

#include <fmt/format.h>

#include "device/sched/claim_policy.hpp"
#include "xstage/core/error.hpp"
#include "xstage/model/model.hpp"
#include "xstage/moe/moe_prediction.hpp"

namespace xstage {

namespace {

// The profile of stores into the GPU's own memory (what the compute-only tile times contain).
constexpr const char* kLocalProfile = "h200-local";

struct TileRef {
  int expert = 0, rows = 0, cols = 0;
  int64_t row0 = 0;  // the pool row of its first row
};

// Tiles of one GEMM in claim order: expert, n-block, m-block (m fastest).
std::vector<TileRef> gemm_tiles(const MoeLaunch& l, int n_total) {
  std::vector<TileRef> out;
  const int nb = (n_total + l.block_n - 1) / l.block_n;
  int64_t base = 0;
  for (size_t e = 0; e < l.expert_rows.size(); ++e) {
    const int rows = l.expert_rows[e];
    const int mb = (rows + l.block_m - 1) / l.block_m;
    for (int n = 0; n < nb; ++n)
      for (int m = 0; m < mb; ++m)
        out.push_back({int(e), std::min(l.block_m, rows - m * l.block_m), std::min(l.block_n, n_total - n * l.block_n),
                       base + int64_t(m) * l.block_m});
    base += rows;
  }
  return out;
}

int64_t launch_rows(const MoeLaunch& l) {
  int64_t rows = 0;
  for (int r : l.expert_rows) rows += r;
  return rows;
}

// The copies' milestones, in pool rows: the end of each block of
// copy_block_rows rows (the last one at the pool's end). An L1 tile whose
// last row is r waits for milestone r / copy_block_rows.
std::vector<int64_t> block_milestones(const MoeLaunch& l) {
  const int64_t rows = launch_rows(l), b = l.copy_block_rows;
  std::vector<int64_t> out;
  out.reserve(size_t((rows + b - 1) / b));
  for (int64_t end = b; end - b < rows; end += b) out.push_back(std::min(end, rows));
  return out;
}

// Each expert's end, in pool rows (moe_rows_ready_ns).
std::vector<int64_t> expert_milestones(const MoeLaunch& l) {
  std::vector<int64_t> out;
  int64_t rows = 0;
  for (int r : l.expert_rows) out.push_back(rows += r);
  return out;
}

void check_launch(const MoeLaunch& l) {
  if (l.hidden < 1 || l.inter < 1 || l.block_m < 1 || l.block_n < 1 || l.sms < 1)
    throw Error(fmt::format("moe launch: expected positive hidden, inter, tile and SM count, got {}, {}, {}x{}, {}",
                            l.hidden, l.inter, l.block_m, l.block_n, l.sms));
  if (l.sms > 65536) throw Error(fmt::format("moe launch: {} SMs; expected at most 65536", l.sms));
  if (l.copy_block_rows < 1)
    throw Error(fmt::format("moe launch: copied-rows blocks of {} rows; expected >= 1", l.copy_block_rows));
  for (int r : l.expert_rows)
    if (r < 0) throw Error(fmt::format("moe launch: an expert has {} rows; expected >= 0", r));
  if (!(l.remote_fraction >= 0 && l.remote_fraction <= 1))
    throw Error(fmt::format("moe launch: remote fraction {}; expected a fraction in [0, 1]", l.remote_fraction));
  if (!(l.compute_scale > 0) || !std::isfinite(l.compute_scale))
    throw Error(fmt::format("moe launch: compute scale {}; expected a positive finite number", l.compute_scale));
  if (!(l.copy_path_fraction >= 0 && l.copy_local_fraction >= 0 &&
        l.copy_path_fraction + l.copy_local_fraction <= 1 + 1e-12))
    throw Error(fmt::format("moe launch: copied shares {} (path) and {} (local): expected >= 0, at most 1 together",
                            l.copy_path_fraction, l.copy_local_fraction));
}

// When the copies, in pool order with the link to themselves, pass each
// milestone (pool rows), without the launch check: the path's share at
// path_Bps and the local share at local_Bps, each a stream of its own.
std::vector<double> rows_ready(const MoeLaunch& l, const std::vector<int64_t>& milestones, double path_Bps,
                               double local_Bps) {
  std::vector<double> out(milestones.size(), 0.0);
  const bool path = l.copy_path_fraction > 0, local = l.copy_local_fraction > 0;
  if (!path && !local) return out;
  if ((path && !(path_Bps > 0)) || (local && !(local_Bps > 0)))
    throw Error("moe launch: copies with a read rate of 0; expected a positive read rate (the profile's R, h200-local's R)");
  for (size_t i = 0; i < out.size(); ++i) {
    const double bytes = double(milestones[i]) * l.hidden * 2.0;
    const double p = path ? bytes * l.copy_path_fraction / path_Bps : 0.0;
    const double q = local ? bytes * l.copy_local_fraction / local_Bps : 0.0;
    out[i] = std::max(p, q) * 1e9;
  }
  return out;
}

// The local share's copy times alone (rows_ready's second stream).
std::vector<double> rows_ready_local(const MoeLaunch& l, const std::vector<int64_t>& milestones, double local_Bps) {
  MoeLaunch only = l;
  only.copy_path_fraction = 0;
  return rows_ready(only, milestones, 1.0, local_Bps);
}

// Whether the launch's row copies read the path while its L2 stores drain
// into it, and the profile measured both directions at once
// (Profile::duplex_read_Bps): then the two share the link.
bool duplex_applies(const MoeLaunch& l, const Profile& p) {
  return p.has_duplex() && l.copy_path_fraction > 0 && l.remote_fraction > 0;
}

// The copies' times when they share the link with the stores (duplex): the
// stores take what they move, up to duplex_store_Bps; the reads get the rest
// of the two directions' measured sum, duplex_read + duplex_store, at most
// what the copy warps read alone (Profile::copy_read_Bps; so that alone,
// duplex_read under a full drain, as the probe measured). The
// stores move the drain rate while the stage holds bytes, else what they
// issue (their bursts' bytes over their issue spans, summed).
std::vector<double> shared_rows_ready(const MoeLaunch& l, const std::vector<int64_t>& milestones, const Profile& p,
                                      const std::vector<BurstSpan>& spans,
                                      const std::vector<OccupancySample>& level, double local_Bps) {
  struct Ev {
    double t;
    double rate;   // change of the issued rate (bytes per ns), for a span's start or end
    double level;  // the stage's level from here (a sample), else -1
  };
  std::vector<Ev> ev;
  ev.reserve(2 * spans.size() + level.size());
  for (const BurstSpan& b : spans)
    if (b.end_ns > b.start_ns && b.bytes > 0) {
      const double r = b.bytes / (b.end_ns - b.start_ns);
      ev.push_back({b.start_ns, r, -1});
      ev.push_back({b.end_ns, -r, -1});
    }
  for (const OccupancySample& o : level) ev.push_back({o.t_ns, 0, o.bytes});
  std::stable_sort(ev.begin(), ev.end(), [](const Ev& x, const Ev& y) { return x.t < y.t; });
  const double R = p.copy_read_Bps() * 1e-9, cap_store = std::min(p.duplex_store_Bps, p.R_Bps) * 1e-9;
  const double both = (p.duplex_read_Bps + p.duplex_store_Bps) * 1e-9;
  std::vector<double> out(milestones.size(), 0.0);
  double need = 0, done = 0, t = 0, issued = 0, held = 0;
  size_t k = 0;
  for (size_t e = 0; e < out.size(); ++e) {
    need = double(milestones[e]) * l.hidden * 2.0 * l.copy_path_fraction;
    while (done < need) {
      while (k < ev.size() && ev[k].t <= t) {
        issued += ev[k].rate;
        if (ev[k].level >= 0) held = ev[k].level;
        ++k;
      }
      const double stores = held > 1e-6 ? cap_store : std::min(std::max(0.0, issued), cap_store);
      const double r = std::clamp(both - stores, 1e-12, R);
      // After the last event the stage drains what it holds at R, then the reads are alone.
      double next = k < ev.size() ? ev[k].t : held > 1e-6 ? t + held / R : std::numeric_limits<double>::infinity();
      if (k >= ev.size() && held > 1e-6 && next <= t) next = t;
      const double finish = t + (need - done) / r;
      if (finish <= next) {
        done = need;
        t = finish;
      } else {
        done += (next - t) * r;
        if (k >= ev.size()) held = 0, issued = 0;
        t = next;
      }
    }
    out[e] = t;
  }
  if (l.copy_local_fraction > 0) {
    const std::vector<double> loc = rows_ready_local(l, milestones, local_Bps);
    for (size_t e = 0; e < out.size(); ++e) out[e] = std::max(out[e], loc[e]);
  }
  return out;
}

// The kernel's claim policy (sched/claim_policy.hpp, the header the device
// compiles) over the launch's tile lists, one claim at a time: the order an
// SM's claim takes when no other SM's claim races it.
class Claims {
 public:
  Claims(const MoeLaunch& l, const MoeSchedulePlan& plan, const std::vector<TileRef>& l1,
         const std::vector<TileRef>& l2)
      : l1_(l1), l2_(l2), spans_(expert_spans(l, l1)), policy_(policy_params(plan), count(l1), count(l2), l.hidden,
                                                              l.inter, first_l1_end(l1, spans_), l.sms) {}

  // The L1 tiles of each expert, [first, end) in claim order ({0, 0}: none).
  static std::vector<sched::ExpertSpan> expert_spans(const MoeLaunch& l, const std::vector<TileRef>& l1) {
    std::vector<sched::ExpertSpan> out(l.expert_rows.size(), sched::ExpertSpan{0, 0});
    for (size_t i = 0; i < l1.size(); ++i) {
      sched::ExpertSpan& s = out[size_t(l1[i].expert)];
      if (s.end == 0) s.first = int(i);
      s.end = int(i) + 1;
    }
    return out;
  }
  // A GEMM's tile count; the kernel counts tiles in 32 bits.
  static int count(const std::vector<TileRef>& tiles) {
    if (tiles.size() > size_t(std::numeric_limits<int>::max()))
      throw Error(fmt::format("moe launch: {} tiles in one GEMM; expected at most {}, as the kernel counts them in 32 bits",
                              tiles.size(), std::numeric_limits<int>::max()));
    return int(tiles.size());
  }
  // L1 tiles through the first expert with rows (0: no tiles).
  static int first_l1_end(const std::vector<TileRef>& l1, const std::vector<sched::ExpertSpan>& spans) {
    return l1.empty() ? 0 : spans[size_t(l1.front().expert)].end;
  }
  // The plan as the kernel gets it; the simulator never runs a negative lag.
  static sched::ClaimPolicyParams policy_params(const MoeSchedulePlan& plan) {
    sched::ClaimPolicyParams p;
    p.order = plan.schedule == MoeSchedule::expert_wave ? sched::ClaimOrder::expert_wave : sched::ClaimOrder::share;
    p.wave_tiles = plan.wave_tiles;
    p.l2_share = float(plan.l2_share);
    p.lag_tiles = std::max(0, plan.lag_tiles);
    return p;
  }

  // 1: claim the next L1 tile, 2: the next L2 tile, 0: nothing left.
  int next() {
    const int gemm = policy_.choose(int(n1_), int(n2_), *this);
    if (gemm != 0) ++(gemm == 1 ? n1_ : n2_);
    return gemm;
  }
  size_t l1_claimed() const { return n1_; }
  size_t l2_claimed() const { return n2_; }

  // Where tiles lie, for the policy.
  sched::ExpertSpan l1_span_of_l2(int t2) const { return spans_[size_t(l2_[size_t(t2)].expert)]; }
  int l1_first(int t1) const { return spans_[size_t(l1_[size_t(t1)].expert)].first; }

 private:
  const std::vector<TileRef>& l1_;
  const std::vector<TileRef>& l2_;
  const std::vector<sched::ExpertSpan> spans_;
  const sched::ClaimPolicy policy_;
  size_t n1_ = 0, n2_ = 0;
};

// Hands out tiles as SMs come free: the claim rules, the tile times and the
// wait of an L2 tile for its expert's L1 tiles (whose ends are known when
// they are claimed: an L1 tile stores nothing through the stage).
class TileClaimer {
 public:
  TileClaimer(const MoeLaunch& l, const MoeSchedulePlan& plan, std::vector<double> ready)
      : l_(l), l1_(gemm_tiles(l, 2 * l.inter)), l2_(gemm_tiles(l, l.hidden)), claims_(l, plan, l1_, l2_),
        local_(find_embedded_profile(kLocalProfile)), ready_(std::move(ready)) {
    const size_t E = l.expert_rows.size();
    t1_.resize(E);
    t2_.resize(E);
    for (size_t e = 0; e < E; ++e) {
      t1_[e] = moe_l1_tile_ns(l, int(e));
      t2_[e] = moe_l2_tile_ns(l, int(e));
    }
    l1_left_.assign(E, 0);
    for (const TileRef& t : l1_) ++l1_left_[size_t(t.expert)];
    l1_done_.assign(E, 0.0);
  }
  size_t l1_tiles() const { return l1_.size(); }
  size_t l2_tiles() const { return l2_.size(); }

  // The tile SM `sm` claims at `t` (false: none left): its claim and start
  // times, the compute time from its start, and the bytes its epilogue stores
  // through the stage.
  bool next(int sm, double t, MoeClaimedTile& c, double& compute_ns) {
    const size_t i1 = claims_.l1_claimed(), i2 = claims_.l2_claimed();
    const int gemm = claims_.next();
    if (gemm == 0) return false;
    c = MoeClaimedTile{};
    c.gemm = gemm;
    c.sm = sm;
    c.claim_ns = t;
    if (gemm == 1) {
      const TileRef& r = l1_[i1];
      const size_t e = size_t(r.expert);
      c.index = int(i1);
      c.expert = r.expert;
      c.rows = r.rows;
      c.row0 = r.row0;
      // The producer waits for the blocks of rows its tile reads.
      const size_t b = size_t((r.row0 + r.rows - 1) / l_.copy_block_rows);
      c.start_ns = std::max(t, b < ready_.size() ? ready_[b] : 0.0);
      compute_ns = t1_[e];
      c.end_ns = c.start_ns + compute_ns;
      l1_done_[e] = std::max(l1_done_[e], c.end_ns);
      --l1_left_[e];
      return true;
    }
    const TileRef& r = l2_[i2];
    const size_t e = size_t(r.expert);
    // The claim rules leave no L2 tile whose expert has an unclaimed L1 tile.
    if (l1_left_[e] != 0)
      throw Error(fmt::format("moe claims: L2 tile {} claimed before its expert's L1 tiles; expected every L1 tile of the expert claimed first", i2));
    c.index = int(i2);
    c.expert = r.expert;
    c.rows = r.rows;
    c.row0 = r.row0;
    c.start_ns = std::max(t, l1_done_[e]);
    c.store_bytes = double(r.rows) * r.cols * 2.0 * l_.remote_fraction;
    // The tile times (measured compute-only, or the GEMM table) contain the
    // tile's store into the GPU's own memory; the rows that go through the
    // stage instead leave that store's T0 out (the stage adds their own).
    const double local_t0 = c.store_bytes > 0 && local_ ? t0_iss_ns(*local_, 1, c.store_bytes) : 0.0;
    compute_ns = std::max(0.0, t2_[e] - local_t0);
    c.end_ns = c.start_ns + compute_ns;  // the store's time comes on top
    return true;
  }

 private:
  const MoeLaunch& l_;
  const std::vector<TileRef> l1_, l2_;
  Claims claims_;
  const Profile* local_;
  const std::vector<double> ready_;        // each block of copy_block_rows pool rows is in the pool
  std::vector<double> t1_, t2_, l1_done_;  // l1_done: the latest end of the expert's L1 tiles claimed so far
  std::vector<int> l1_left_;
};

// The claims and, where L2 tiles store through the stage, the stage itself in
// one event loop: an SM claims its next tile when its last one (store
// included) is done, so the order follows the stalls.
// `ready`: when each block of copy_block_rows pool rows is copied; `spans` and `level`, if
// given, get the stores' issue spans and the stage's level over time.
MoeClaimSchedule run_claims_once(const MoeLaunch& l, const MoeSchedulePlan& plan, const Profile& profile, bool record,
                                 std::vector<double> ready, std::vector<BurstSpan>* spans = nullptr,
                                 std::vector<OccupancySample>* level = nullptr) {
  const double copies_end = ready.empty() ? 0.0 : *std::max_element(ready.begin(), ready.end());
  TileClaimer claimer(l, plan, std::move(ready));
  MoeClaimSchedule out;
  out.l1_tiles = double(claimer.l1_tiles());
  out.l2_tiles = double(claimer.l2_tiles());
  if (record) out.tiles.reserve(claimer.l1_tiles() + claimer.l2_tiles());
  auto keep = [&](const MoeClaimedTile& c) {
    (c.gemm == 2 ? out.idle_ns : out.rows_wait_ns) += c.start_ns - c.claim_ns;
    out.store_bytes += c.store_bytes;
    if (record) out.tiles.push_back(c);
  };
  MoeClaimedTile c;
  double compute = 0;
  if (l.remote_fraction <= 0 || claimer.l2_tiles() == 0) {
    // Nothing goes through the stage: a list schedule, the SM free first claims next.
    using Free = std::pair<double, int>;  // (time the SM is free, SM)
    std::priority_queue<Free, std::vector<Free>, std::greater<>> free;
    for (int s = 0; s < l.sms; ++s) free.push({0.0, s});
    while (!free.empty()) {
      const auto [t, sm] = free.top();
      free.pop();
      if (!claimer.next(sm, t, c, compute)) {
        out.makespan_ns = std::max(out.makespan_ns, t);
        continue;
      }
      keep(c);
      free.push({c.end_ns, sm});
    }
    out.drained_ns = out.makespan_ns;
    return out;
  }
  // A store's fixed issue cost is time the SM spends before its bytes flow,
  // whatever the stage holds: it joins the compute before it (one event fewer
  // a tile; the same times up to rounding).
  StageConfig stage = stage_from_profile(profile);
  if (duplex_applies(l, profile)) {  // the stores drain slower while the copies read
    stage.R_early_Bps = std::min(profile.duplex_store_Bps, profile.R_Bps);
    stage.R_early_until_ns = copies_end;
  }
  const double fixed = stage.issue.fixed_ns;
  stage.issue.fixed_ns = 0;
  std::vector<long> last(size_t(l.sms), -1);  // each SM's last recorded tile
  const StepFeed feed = [&](int sm, double t, std::vector<Step>& steps) {
    if (record && last[size_t(sm)] >= 0) out.tiles[size_t(last[size_t(sm)])].end_ns = t;
    if (!claimer.next(sm, t, c, compute)) return;
    keep(c);
    if (record) last[size_t(sm)] = long(out.tiles.size()) - 1;
    const bool store = c.store_bytes > 0;
    steps.push_back(Step::compute(c.start_ns - t + compute + (store ? fixed : 0.0)));
    if (store) steps.push_back(Step::store(c.store_bytes));
  };
  SimObserver watch;
  if (spans) watch.on_burst = [spans](const BurstSpan& b) { spans->push_back(b); };
  if (level) {
    stage.record_timeline = true;
    watch.on_sample = [level](const OccupancySample& o) { level->push_back(o); };
  }
  const SimResult sim = simulate_fed(stage, l.sms, feed, watch);
  out.makespan_ns = sim.total_ns;
  out.drained_ns = std::max(sim.total_ns, sim.drained_ns);
  out.stalled_ns = sim.stalled_ns;
  out.max_occupancy = sim.max_occupancy;
  return out;
}

// The copies and the stores depend on each other where they share the link:
// the copies' times gate L1, hence when L2 stores; the stores' rate sets the
// copies' share. From the copies alone at R, alternately simulate and
// re-time the copies until their times move by less than kCopiesSettle of
// the last copy's time (kCopiesRounds at most). Undamped the re-timing
// swings (late copies, late stores, a freer link, early copies, ...), so
// each round moves halfway to the new times; what is left is reported.
constexpr int kCopiesRounds = 12;
constexpr double kCopiesSettle = 1e-3;

MoeClaimSchedule run_claims(const MoeLaunch& l, const MoeSchedulePlan& plan, const Profile& profile, bool record) {
  check_launch(l);
  const Profile* local = find_embedded_profile(kLocalProfile);
  const double local_Bps = local ? local->copy_read_Bps() : 0.0;
  const std::vector<int64_t> blocks = block_milestones(l);
  std::vector<double> ready = rows_ready(l, blocks, profile.copy_read_Bps(), local_Bps);
  double moved = 0;
  if (duplex_applies(l, profile)) {
    std::vector<BurstSpan> spans;
    std::vector<OccupancySample> level;
    for (int round = 0; round < kCopiesRounds; ++round) {
      spans.clear();
      level.clear();
      run_claims_once(l, plan, profile, false, ready, &spans, &level);
      const std::vector<double> next = shared_rows_ready(l, blocks, profile, spans, level, local_Bps);
      moved = 0;
      for (size_t e = 0; e < next.size(); ++e)
        moved = std::max(moved, std::abs(next[e] - ready[e]) / std::max(1.0, next.back()));
      const double step = round == 0 ? 1.0 : 0.5;  // the first from the copies alone, whole
      for (size_t e = 0; e < next.size(); ++e) ready[e] += step * (next[e] - ready[e]);
      if (moved < kCopiesSettle) break;
    }
  }
  MoeClaimSchedule out = run_claims_once(l, plan, profile, record, std::move(ready));
  out.copies_unsettled = moved < kCopiesSettle ? 0.0 : moved;
  return out;
}

// The policy the kernel would run for an interleaved plan with this lag.
sched::ClaimPolicy share_policy(const MoeLaunch& l, int lag_tiles, double l2_share) {
  check_launch(l);
  const std::vector<TileRef> l1 = gemm_tiles(l, 2 * l.inter), l2 = gemm_tiles(l, l.hidden);
  MoeSchedulePlan plan;
  plan.schedule = MoeSchedule::interleaved;
  plan.l2_share = l2_share;
  plan.lag_tiles = lag_tiles;
  return sched::ClaimPolicy(Claims::policy_params(plan), Claims::count(l1), Claims::count(l2), l.hidden, l.inter,
                            Claims::first_l1_end(l1, Claims::expert_spans(l, l1)), l.sms);
}

}  // namespace

MoeClaimSchedule moe_claim_schedule(const MoeLaunch& l, const MoeSchedulePlan& plan, const Profile& profile,
                                    bool record_tiles) {
  return run_claims(l, plan, profile, record_tiles);
}

double moe_default_l2_share(const MoeLaunch& l, int lag_tiles) { return share_policy(l, lag_tiles, 0).share; }

long moe_share_start_tiles(const MoeLaunch& l, int lag_tiles) { return share_policy(l, lag_tiles, 0).t1_start; }

std::vector<double> moe_rows_ready_ns(const MoeLaunch& l, const Profile& profile) {
  check_launch(l);
  const Profile* local = find_embedded_profile(kLocalProfile);
  return rows_ready(l, expert_milestones(l), profile.copy_read_Bps(), local ? local->copy_read_Bps() : 0.0);
}

double moe_compute_only_ns(const MoeLaunch& launch) {
  MoeLaunch local = launch;
  local.remote_fraction = 0;
  local.copy_path_fraction = local.copy_local_fraction = 0;
  MoeSchedulePlan plan;
  plan.schedule = MoeSchedule::interleaved;
  plan.lag_tiles = sched::claim_lag_tiles(0, launch.sms);
  return run_claims(local, plan, Profile{}, false).makespan_ns;
}

double moe_scale_to_compute_only(const MoeLaunch& launch, double measured_ns) {
  if (!(measured_ns > 0) || !std::isfinite(measured_ns))
    throw Error(fmt::format("moe compute-only time: {} ns; expected a positive finite time", measured_ns));
  MoeLaunch unit = launch;
  unit.compute_scale = 1;
  const double table = moe_compute_only_ns(unit);
  if (!(table > 0)) throw Error("moe compute-only time: the launch has no tiles to scale; expected a launch with at least one tile");
  return measured_ns / table;
}

MoeExpertsPrediction moe_predict_experts(const MoeLaunch& l, const MoeSchedulePlan& plan, const Profile& profile) {
  MoeExpertsPrediction out;
  out.compute_ns = moe_compute_only_ns(l);
  const MoeClaimSchedule cs = run_claims(l, plan, profile, false);
  out.store_bytes = cs.store_bytes;
  // The combine learns of the last row from a flag stored after a fence that
  // waits for the drain: two store-to-visibility latencies past the drain.
  const double latency = cs.store_bytes > 0 ? profile.latency_ns : 0.0;
  out.experts_ns = cs.drained_ns + 2 * latency;
  out.stalled_ns = cs.stalled_ns;
  out.idle_ns = cs.idle_ns;
  out.rows_wait_ns = cs.rows_wait_ns;
  out.max_occupancy = cs.max_occupancy;
  return out;
}

}  // namespace xstage
