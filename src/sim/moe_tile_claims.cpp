// The fused MoE kernel's tile claims as a list schedule, and the launch through
// the X-Stage simulator (include/xstage/moe/moe_prediction.hpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>

#include <fmt/format.h>

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
  if (l.sms > 65536) throw Error(fmt::format("moe launch: {} SMs; at most 65536 are simulated", l.sms));
  if (l.copy_block_rows < 1)
    throw Error(fmt::format("moe launch: copied-rows blocks of {} rows; expected >= 1", l.copy_block_rows));
  for (int r : l.expert_rows)
    if (r < 0) throw Error(fmt::format("moe launch: an expert has {} rows; expected >= 0", r));
  if (!(l.remote_fraction >= 0 && l.remote_fraction <= 1))
    throw Error(fmt::format("moe launch: remote fraction {} outside [0, 1]", l.remote_fraction));
  if (!(l.compute_scale > 0) || !std::isfinite(l.compute_scale))
    throw Error(fmt::format("moe launch: compute scale must be positive, got {}", l.compute_scale));
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
    throw Error("moe launch: copies need a positive read rate (the profile's R, h200-local's R)");
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

// What the claim policy sees: the two counters and the work claimed so far
// (sched/layer_claims.cuh, with its float arithmetic, so that a decision at a
// tie goes the same way as on the GPU).
class Claims {
 public:
  Claims(const MoeLaunch& l, const MoeSchedulePlan& plan, const std::vector<TileRef>& l1,
         const std::vector<TileRef>& l2)
      : plan_(plan), l1_(l1), l2_(l2), k1_(float(l.hidden)), k2_(float(l.inter)), lag_(std::max(0, plan.lag_tiles)) {
    const size_t E = l.expert_rows.size();
    last_l1_.assign(E, -1);
    for (size_t i = 0; i < l1.size(); ++i) last_l1_[size_t(l1[i].expert)] = int(i);
    t1_start_ = share_start(l1, last_l1_, lag_);
    share_ = float(plan.l2_share);
    if (share_ <= 0.f) share_ = default_share(float(l1.size() - size_t(t1_start_)) * k1_, float(l2.size()) * k2_);
    if (plan.schedule == MoeSchedule::expert_wave) build_waves(l);
  }

  // L1 tiles claimed before the even spread starts: through the first expert
  // with rows, plus the lag (at most all of them).
  static long share_start(const std::vector<TileRef>& l1, const std::vector<int>& last_l1, long lag) {
    const long first_end = l1.empty() ? 0 : long(last_l1[size_t(l1.front().expert)]) + 1;
    return std::min(first_end + lag, long(l1.size()));
  }
  // L2's share of the work left from there (w1: L1 work after the start, w2: all L2 work).
  static float default_share(float w1, float w2) { return w1 + w2 > 0.f ? w2 / (w1 + w2) : 0.f; }

  // 1: claim the next L1 tile, 2: the next L2 tile, 0: nothing left.
  int next() {
    if (plan_.schedule == MoeSchedule::expert_wave) return next_wave();
    const bool l1_left = n1_ < l1_.size(), l2_left = n2_ < l2_.size();
    if (!l1_left) return l2_left ? take(2) : 0;
    if (l2_left && l2_allowed() && want_l2()) return take(2);
    return take(1);
  }
  size_t l1_claimed() const { return n1_; }
  size_t l2_claimed() const { return n2_; }
  float share() const { return share_; }
  long share_start_tiles() const { return t1_start_; }

 private:
  int take(int gemm) {
    ++(gemm == 1 ? n1_ : n2_);
    return gemm;
  }
  // L2's work claimed is at most its share of the work claimed since the spread started.
  bool want_l2() const {
    const float w1 = float(std::max(long(n1_) - t1_start_, 0L)) * k1_, w2 = float(n2_) * k2_;
    return w2 <= share_ * (w1 + w2);
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
  const float k1_, k2_;
  const long lag_;
  long t1_start_ = 0;
  float share_ = 0;
  std::vector<int> last_l1_;
  std::vector<size_t> l1_end_, l2_end_;
  size_t wave_ = 0, n1_ = 0, n2_ = 0;
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
      throw Error(fmt::format("moe claims: L2 tile {} claimed before its expert's L1 tiles", i2));
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

}  // namespace

MoeClaimSchedule moe_claim_schedule(const MoeLaunch& l, const MoeSchedulePlan& plan, const Profile& profile,
                                    bool record_tiles) {
  return run_claims(l, plan, profile, record_tiles);
}

double moe_default_l2_share(const MoeLaunch& l, int lag_tiles) {
  check_launch(l);
  const std::vector<TileRef> l1 = gemm_tiles(l, 2 * l.inter), l2 = gemm_tiles(l, l.hidden);
  std::vector<int> last(l.expert_rows.size(), -1);
  for (size_t i = 0; i < l1.size(); ++i) last[size_t(l1[i].expert)] = int(i);
  const long start = Claims::share_start(l1, last, std::max(0, lag_tiles));
  return Claims::default_share(float(l1.size() - size_t(start)) * float(l.hidden), float(l2.size()) * float(l.inter));
}

long moe_share_start_tiles(const MoeLaunch& l, int lag_tiles) {
  check_launch(l);
  const std::vector<TileRef> l1 = gemm_tiles(l, 2 * l.inter);
  std::vector<int> last(l.expert_rows.size(), -1);
  for (size_t i = 0; i < l1.size(); ++i) last[size_t(l1[i].expert)] = int(i);
  return Claims::share_start(l1, last, std::max(0, lag_tiles));
}

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
  plan.lag_tiles = launch.sms;
  return run_claims(local, plan, Profile{}, false).makespan_ns;
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
