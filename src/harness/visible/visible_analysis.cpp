// The CPU half of `xstage visible`: option checks, the clock-offset estimate,
// the model's fluid drain, and the per-burst report of a trace.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "device/visible/visible_params.hpp"
#include "harness/visible/visible.hpp"
#include "xstage/core/error.hpp"
#include "xstage/model/simulator.hpp"

namespace xstage {

const char* to_string(VisiblePath p) {
  switch (p) {
    case VisiblePath::host: return "host";
    case VisiblePath::peer: return "peer";
    case VisiblePath::local: return "local";
  }
  return "?";
}

VisiblePath parse_visible_path(const std::string& s) {
  for (VisiblePath p : {VisiblePath::host, VisiblePath::peer, VisiblePath::local})
    if (s == to_string(p)) return p;
  throw Error(fmt::format("--path: unknown value '{}'; expected one of host, peer, local", s));
}

const char* default_profile_name(VisiblePath p) {
  switch (p) {
    case VisiblePath::host: return "h200-host-pcie";
    case VisiblePath::peer: return "h200-peer";
    case VisiblePath::local: return "h200-local";
  }
  return "?";
}

uint64_t visible_chunk_bytes(const VisiblePoint& p) {
  if (p.K < 1 || !(p.V_bytes > 0)) return 0;
  return static_cast<uint64_t>(p.V_bytes / p.K) / 16 * 16;
}

void validate(const VisiblePoint& p) {
  if (p.device < 0) throw Error(fmt::format("--device: {}; expected >= 0", p.device));
  if (p.K < 1 || p.K > int(visible::kMaxProducers))
    throw Error(fmt::format("--K: {} producers; expected 1 .. {}", p.K, visible::kMaxProducers));
  if (p.warps < 1 || p.warps > 32) throw Error(fmt::format("--warps: {}; expected 1 .. 32", p.warps));
  if (p.bursts < 1 || p.bursts > int(visible::kMaxBursts))
    throw Error(fmt::format("--bursts: {}; expected 1 .. {}", p.bursts, visible::kMaxBursts));
  if (uint64_t(p.bursts) * uint64_t(p.K) > visible::kMaxMarkers)
    throw Error(fmt::format("--bursts x --K = {} markers; expected at most {}", uint64_t(p.bursts) * p.K,
                            visible::kMaxMarkers));
  if (!(p.gap_ns >= 0) || !std::isfinite(p.gap_ns) || p.gap_ns > 1e9)
    throw Error(fmt::format("--G: {} ns; expected 0 .. 1 s", p.gap_ns));
  if (!(p.V_bytes > 0) || !std::isfinite(p.V_bytes)) throw Error(fmt::format("--V: {} B; expected > 0", p.V_bytes));
  const uint64_t chunk = visible_chunk_bytes(p);
  if (chunk == 0)
    throw Error(fmt::format("--V: {} B is too small for K = {} producers; expected at least 16 B a producer", p.V_bytes, p.K));
  if (chunk > (uint64_t(1) << 31)) throw Error(fmt::format("--V: a producer's share of {} B exceeds 2 GiB; expected at most 2 GiB a producer", chunk));
  if (!(p.dst_bytes >= double(chunk) * p.K))
    throw Error(fmt::format("--dst-size: {} B; expected at least one burst ({} B)", p.dst_bytes, chunk * p.K));
  if (!(p.timeout_ns >= 1e6) || !(p.timeout_ns <= 600e9))
    throw Error(fmt::format("--timeout: {} ns; expected 1 ms .. 600 s", p.timeout_ns));
  if (p.calib_rounds < 1 || p.calib_rounds > 1000000)
    throw Error(fmt::format("--calib-rounds: {}; expected 1 .. 1000000", p.calib_rounds));
}

// ---- clocks

ClockOffset estimate_offset(const std::vector<PingRound>& rounds, double timer_resolution_ns) {
  if (rounds.empty()) throw Error("clock calibration: no ping-pong round completed; expected at least one round");
  if (!(timer_resolution_ns >= 0)) throw Error("clock calibration: a negative timer resolution; expected >= 0");
  const PingRound* best = nullptr;
  for (const PingRound& r : rounds) {
    if (!(r.t_recv_ns >= r.t_send_ns))
      throw Error(fmt::format("clock calibration: a round received at {} ns before it was sent at {} ns; expected clocks that do not run backwards", r.t_recv_ns,
                              r.t_send_ns));
    if (!best || r.t_recv_ns - r.t_send_ns < best->t_recv_ns - best->t_send_ns) best = &r;
  }
  ClockOffset c;
  c.rtt_ns = best->t_recv_ns - best->t_send_ns;
  c.at_ns = 0.5 * (best->t_send_ns + best->t_recv_ns);
  // The GPU read its clock somewhere in [send, recv]; the reading is the true
  // time rounded down to the timer's step.
  c.offset_ns = best->gpu_ns + 0.5 * timer_resolution_ns - c.at_ns;
  c.error_ns = 0.5 * c.rtt_ns + 0.5 * timer_resolution_ns;
  c.rounds = static_cast<int>(rounds.size());
  return c;
}

double ClockMap::at(double t) const {
  const double span = after.at_ns - before.at_ns;
  if (!(span > 0)) return before.offset_ns;
  return before.offset_ns + (after.offset_ns - before.offset_ns) * (t - before.at_ns) / span;
}

double ClockMap::error_ns() const { return std::max(before.error_ns, after.error_ns); }

double ClockMap::drift_ppm() const {
  const double span = after.at_ns - before.at_ns;
  return span > 0 ? 1e6 * (after.offset_ns - before.offset_ns) / span : 0.0;
}

// ---- the fluid stage

FluidStage::FluidStage(const std::vector<Arrival>& arrivals, double R_Bps) {
  if (!(R_Bps > 0)) throw Error("fluid stage: a drain rate <= 0; expected > 0");
  const double R = R_Bps * 1e-9;  // bytes per ns
  struct Event {
    double t, rate, impulse;
  };
  std::vector<Event> ev;
  ev.reserve(2 * arrivals.size());
  for (const Arrival& a : arrivals) {
    if (!(a.bytes > 0)) continue;
    if (a.end_ns > a.start_ns) {
      const double r = a.bytes / (a.end_ns - a.start_ns);
      ev.push_back({a.start_ns, r, 0});
      ev.push_back({a.end_ns, -r, 0});
    } else {
      ev.push_back({a.start_ns, 0, a.bytes});
    }
  }
  std::sort(ev.begin(), ev.end(), [](const Event& x, const Event& y) { return x.t < y.t; });
  double t = ev.empty() ? 0 : ev.front().t, a = 0, d = 0, rate = 0;
  auto push = [&] {
    t_.push_back(t);
    a_.push_back(a);
    d_.push_back(std::min(d, a));
  };
  push();
  // Advances the stage from t to t1 at the current arrival rate.
  auto advance = [&](double t1) {
    double dt = t1 - t;
    if (dt <= 0) return;
    const double q = a - d;
    if (q > 0 && rate < R) {
      const double empty_after = q / (R - rate);
      if (empty_after < dt) {  // the queue empties inside the segment, then departures follow arrivals
        t += empty_after;
        a += rate * empty_after;
        d = a;
        push();
        dt = t1 - t;
      }
    }
    if (a - d > 0 || rate > R) {
      a += rate * dt;
      d += R * dt;
    } else {
      a += rate * dt;
      d = a;
    }
    t = t1;
    push();
  };
  size_t active = 0;
  for (size_t i = 0; i < ev.size();) {
    advance(ev[i].t);
    for (; i < ev.size() && ev[i].t == t; ++i) {
      a += ev[i].impulse;
      rate += ev[i].rate;
      if (ev[i].rate > 0) ++active;
      if (ev[i].rate < 0) --active;
    }
    if (active == 0) rate = 0;  // no rounding residue once every arrival has ended
    push();
  }
  if (a > d) advance(t + (a - d) / R);
  d_.back() = a_.back();  // the tail drains completely
}

namespace {
double interpolate(const std::vector<double>& t, const std::vector<double>& y, double x) {
  if (t.empty() || x < t.front()) return 0;
  const size_t i = std::upper_bound(t.begin(), t.end(), x) - t.begin();  // first breakpoint after x
  if (i >= t.size()) return y.back();
  const size_t j = i - 1;
  const double span = t[i] - t[j];
  return span > 0 ? y[j] + (y[i] - y[j]) * (x - t[j]) / span : y[j];
}
}  // namespace

double FluidStage::arrived(double t) const { return interpolate(t_, a_, t); }
double FluidStage::departed(double t) const { return interpolate(t_, d_, t); }

double FluidStage::max_occupancy() const {
  double m = 0;
  for (size_t i = 0; i < t_.size(); ++i) m = std::max(m, a_[i] - d_[i]);
  return m;
}

double FluidStage::time_departed(double bytes) const {
  if (d_.empty()) return bytes > 0 ? std::numeric_limits<double>::infinity() : 0;
  const double target = bytes * (1 - 1e-12);
  if (target > d_.back()) return std::numeric_limits<double>::infinity();
  const size_t i = std::lower_bound(d_.begin(), d_.end(), target) - d_.begin();
  if (i == 0) return t_.front();
  const double rise = d_[i] - d_[i - 1];
  return rise > 0 ? t_[i - 1] + (t_[i] - t_[i - 1]) * (target - d_[i - 1]) / rise : t_[i];
}

// ---- the report

bool VisibleReport::all_seen() const {
  return trace.markers_seen == uint64_t(trace.point.K) * uint64_t(trace.point.bursts);
}

namespace {
// Cumulative count of sorted times <= t.
double count_upto(const std::vector<double>& sorted, double t) {
  return double(std::upper_bound(sorted.begin(), sorted.end(), t) - sorted.begin());
}
}  // namespace

VisibleReport analyse_visible(const VisibleTrace& tr, const Profile& profile) {
  const int K = tr.point.K, B = tr.point.bursts;
  const size_t n = size_t(K) * B;
  if (tr.start_ns.size() != n || tr.issued_ns.size() != n || tr.fenced_ns.size() != n || tr.seen_ns.size() != n)
    throw Error(fmt::format("visible trace: expected {} records of each kind (K = {} x {} bursts)", n, K, B));
  if (!(profile.R_Bps > 0)) throw Error(fmt::format("profile {}: R <= 0; expected R > 0", profile.name));
  VisibleReport r;
  r.trace = tr;
  r.profile_name = profile.name;
  r.R_Bps = profile.R_Bps;
  r.Q_bytes = profile.Q_bytes;
  r.latency_ns = profile.latency_ns;
  const double chunk = double(tr.chunk_bytes), V = tr.V_bytes;
  const double nan = std::numeric_limits<double>::quiet_NaN();

  std::vector<double> issued_sorted(tr.issued_ns), seen_sorted;
  std::sort(issued_sorted.begin(), issued_sorted.end());
  for (double s : tr.seen_ns)
    if (std::isfinite(s)) seen_sorted.push_back(s);
  std::sort(seen_sorted.begin(), seen_sorted.end());
  r.tolerance_ns = tr.clock.error_ns() + tr.timer_resolution_ns + tr.observer_resolution_ns + tr.poll_interval_ns;

  // The model: the profile's drain fed by the measured issue of every chunk.
  std::vector<Arrival> measured(n);
  for (size_t i = 0; i < n; ++i) measured[i] = {tr.start_ns[i], tr.issued_ns[i], chunk};
  const FluidStage model(measured, profile.R_Bps);

  // The simulator: the same K, V, G and bursts on the profile, from t = 0 (the run's first store).
  const SimResult sim = simulate(stage_from_profile(profile), periodic_programs(K, V, tr.point.gap_ns, B));
  std::vector<double> sim_start(B, std::numeric_limits<double>::infinity()), sim_end(B, 0);
  std::vector<Arrival> simulated;
  simulated.reserve(sim.bursts.size());
  for (const BurstSpan& s : sim.bursts) {
    if (s.index < 0 || s.index >= B) continue;
    sim_start[s.index] = std::min(sim_start[s.index], s.start_ns);
    sim_end[s.index] = std::max(sim_end[s.index], s.end_ns);
    simulated.push_back({s.start_ns, s.end_ns, s.bytes});
  }
  const FluidStage sim_stage(simulated, profile.R_Bps);

  double first_start = std::numeric_limits<double>::infinity(), last_issued = 0;
  for (int b = 0; b < B; ++b) {
    VisibleBurst x;
    x.burst = b;
    x.issue_start_ns = std::numeric_limits<double>::infinity();
    x.first_visible_ns = std::numeric_limits<double>::infinity();
    bool all = true;
    for (int k = 0; k < K; ++k) {
      const size_t i = size_t(b) * K + k;
      x.issue_start_ns = std::min(x.issue_start_ns, tr.start_ns[i]);
      x.issue_end_ns = std::max(x.issue_end_ns, tr.issued_ns[i]);
      x.fence_end_ns = std::max(x.fence_end_ns, tr.fenced_ns[i]);
      if (std::isfinite(tr.seen_ns[i])) {
        x.first_visible_ns = std::min(x.first_visible_ns, tr.seen_ns[i]);
        x.visible_ns = std::max(x.visible_ns, tr.seen_ns[i]);
      } else {
        all = false;
      }
      if (std::isfinite(tr.seen_ns[i]) && tr.seen_ns[i] < tr.fenced_ns[i] - r.tolerance_ns) ++r.early_markers;
    }
    if (!all) x.visible_ns = nan;
    if (!std::isfinite(x.first_visible_ns)) x.first_visible_ns = nan;
    first_start = std::min(first_start, x.issue_start_ns);
    last_issued = std::max(last_issued, x.issue_end_ns);
    x.bytes_issued = chunk * count_upto(issued_sorted, x.issue_end_ns);
    x.bytes_visible = chunk * count_upto(seen_sorted, x.issue_end_ns);
    x.occupancy_bytes = x.bytes_issued - x.bytes_visible;
    x.drain_ns = V / profile.R_Bps * 1e9;
    x.model_visible_ns = model.time_departed((b + 1) * V) + profile.latency_ns;
    x.model_occupancy_bytes = model.occupancy(x.issue_end_ns);
    x.sim_issue_start_ns = sim_start[b];
    x.sim_issue_end_ns = sim_end[b];
    x.sim_visible_ns = sim_stage.time_departed((b + 1) * V) + profile.latency_ns;
    x.sim_occupancy_bytes = sim_stage.occupancy(sim_end[b]);
    r.bursts.push_back(x);
  }

  struct Stamp {
    double t;
    int burst;
  };
  std::vector<Stamp> stamps;
  for (const VisibleBurst& x : r.bursts) {
    stamps.push_back({x.issue_end_ns, x.burst});
    if (std::isfinite(x.visible_ns)) stamps.push_back({x.visible_ns, x.burst});
  }
  std::sort(stamps.begin(), stamps.end(), [](const Stamp& a, const Stamp& b) { return a.t < b.t; });
  r.min_occupancy_bytes = std::numeric_limits<double>::infinity();
  for (const Stamp& s : stamps) {
    VisibleSample v;
    v.t_ns = s.t;
    v.occupancy_bytes = chunk * (count_upto(issued_sorted, s.t) - count_upto(seen_sorted, s.t));
    v.model_occupancy_bytes = model.occupancy(s.t);
    v.sim_occupancy_bytes = sim_stage.occupancy(s.t);
    if (v.occupancy_bytes > r.max_occupancy_bytes) {
      r.max_occupancy_bytes = v.occupancy_bytes;
      r.max_occupancy_burst = s.burst;
    }
    r.min_occupancy_bytes = std::min(
        r.min_occupancy_bytes, chunk * (count_upto(issued_sorted, s.t) - count_upto(seen_sorted, s.t - r.tolerance_ns)));
    r.timeline.push_back(v);
  }
  if (stamps.empty()) r.min_occupancy_bytes = 0;
  r.model_max_occupancy_bytes = model.max_occupancy();
  r.sim_max_occupancy_bytes = sim_stage.max_occupancy();
  if (last_issued > first_start) r.issue_rate_Bps = V * B / ((last_issued - first_start) * 1e-9);
  if (B >= 2 && std::isfinite(r.bursts.back().visible_ns) && r.bursts.back().visible_ns > r.bursts.front().visible_ns)
    r.visible_rate_Bps = V * (B - 1) / ((r.bursts.back().visible_ns - r.bursts.front().visible_ns) * 1e-9);
  return r;
}

}  // namespace xstage
