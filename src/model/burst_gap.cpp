#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "xstage/core/error.hpp"
#include "xstage/model/model.hpp"

namespace xstage {

const char* to_string(Regime r) { return r == Regime::free ? "free" : "drain"; }

const char* to_string(ModelKind m) {
  switch (m) {
    case ModelKind::burst_gap: return "burst_gap";
    case ModelKind::completion_coupled: return "completion_coupled";
    case ModelKind::unbounded_async: return "unbounded_async";
  }
  return "?";
}

double t0_iss_ns(const Profile& p, double K, double V) {
  const double rate = std::min(K * p.t0.per_producer_Bps, p.t0.aggregate_Bps);
  if (!p.t0.has_near()) return p.t0.fixed_ns + V / rate * 1e9;
  // Two-rate fill of each producer's near queue: its first near_bytes fast, the rest at the producer's rate.
  const double near = std::min(V, K * p.t0.near_bytes);
  const double near_rate = std::min(K * p.t0.near_per_producer_Bps, p.t0.aggregate_Bps);
  return p.t0.fixed_ns + (near / near_rate + (V - near) / rate) * 1e9;
}

double cold_burst_ns(const Profile& p, double K, double V, double n) {
  const double offered = p.empty_capacity(n * V);
  return std::max(t0_iss_ns(p, K, V), p.t0.fixed_ns + (V - offered) / p.R_Bps * 1e9);
}

namespace {
double gap_cap_ns(const Profile& p) { return std::max(0.0, p.Q_bytes / p.R_Bps * 1e9 - p.t0.fixed_ns); }
}  // namespace

Prediction predict(const Profile& p, double K, double V, double G) {
  if (!(K >= 1)) throw Error(fmt::format("predict: K = {}; expected at least 1 producer", K));
  if (!(V > 0)) throw Error(fmt::format("predict: V = {} bytes; expected more than 0 bytes", V));
  if (!(G >= 0)) throw Error(fmt::format("predict: G = {} ns; expected 0 ns or more", G));
  Prediction r;
  const double v_over_r = V / p.R_Bps * 1e9;
  r.t0_ns = t0_iss_ns(p, K, V);
  r.gap_cap_ns = gap_cap_ns(p);
  // Unclamped here: when Q/R < fixed even a drained stage leaves fixed + (V - Q)/R.
  r.drain_ns = v_over_r - std::min(G, p.Q_bytes / p.R_Bps * 1e9 - p.t0.fixed_ns);
  r.t_iss_ns = std::max(r.t0_ns, r.drain_ns);
  r.regime = r.drain_ns > r.t0_ns ? Regime::drain : Regime::free;
  r.exceeds_capacity = p.t0.fixed_ns + (V - p.Q_bytes) / p.R_Bps * 1e9 > r.t0_ns;  // V > Q + R (T0 - fixed)
  r.onset_gap_ns = r.exceeds_capacity ? kInf : std::max(0.0, v_over_r - r.t0_ns);
  r.stall_ns = r.t_iss_ns - r.t0_ns;
  r.period_ns = r.t_iss_ns + G;
  r.utilisation = r.period_ns > 0 ? G / r.period_ns : 0.0;
  // Net growth of the stage per burst while nothing stalls: g = V - R*(T0 + G).
  // Burst 0 starts on an empty stage and may use all of Q; burst n >= 1 starts
  // with n*g queued, may fill only up to Q_fill, and peaks at n*g + V - R*T0:
  // it is free while n <= (Q_fill - V + R*T0) / g.
  const double growth = V - p.R_Bps * (r.t0_ns + G) * 1e-9;
  if (r.regime == Regime::free || growth <= 0)
    r.transient_bursts = kInf;
  else if (r.exceeds_capacity || G >= r.gap_cap_ns)
    r.transient_bursts = 0;  // every burst starts on an empty stage and overflows it
  else
    r.transient_bursts =
        1 + std::max(0.0, std::floor((p.fill_capacity() - V + p.R_Bps * r.t0_ns * 1e-9) / growth));
  return r;
}

namespace {
// Sum over bursts n in [first, last) of max(floor, a - n b) (b >= 0): the issue
// times of bursts that each start on an empty stage after a cold start
// (a - n b: the overflow of the capacity the stage has regained by burst n).
double sum_of_ramp(double floor, double a, double b, long first, long last) {
  double sum = double(last - first) * floor;
  if (!(a > floor)) return sum;
  // Bursts n < m overflow (a - n b > floor); m = inf when nothing is regained.
  const double m = b > 0 ? std::ceil((a - floor) / b) : kInf;
  const double lo = double(first), hi = std::min(double(last), m);
  if (hi <= lo) return sum;
  const double count = hi - lo;
  return sum + count * (a - floor) - b * (lo + hi - 1) * count / 2;
}
}  // namespace

double windowed_issue_ns(const Profile& p, double K, double V, double G, long first, long last) {
  if (last <= first) throw Error(fmt::format("windowed_issue_ns: burst window [{}, {}) is empty; expected last > first", first, last));
  const Prediction r = predict(p, K, V, G);
  const double n = double(last - first);
  if (!p.has_cold_start()) {  // as before the cold start: the first transient_bursts free, the rest steady
    if (!std::isfinite(r.transient_bursts)) return r.t_iss_ns;
    const double n_free = std::clamp(r.transient_bursts - first, 0.0, n);
    return (n_free * r.t0_ns + (n - n_free) * r.t_iss_ns) / n;
  }
  const double over_cold = p.t0.fixed_ns + (V - p.Q_cold_bytes) / p.R_Bps * 1e9;  // burst 0's overflow
  if (r.regime == Regime::free || G >= r.gap_cap_ns) {
    // Every burst starts on an empty stage: burst n gets the capacity regained
    // since the cold start, min(Q, Q_cold + n V Q_warm_per_byte): cold_burst_ns(n).
    const double regain = p.Q_warm_per_byte * V / p.R_Bps * 1e9;
    return sum_of_ramp(r.t_iss_ns, over_cold, regain, first, last) / n;
  }
  // Drain regime: burst 0 starts on an empty, cold stage and ends with e0
  // queued: V - R T0 if it fits, its cold capacity if it overflows it. Burst n
  // >= 1 then starts with e0 - R G + (n - 1) g queued (g = V - R (T0 + G), the
  // growth per free burst) and is free while it peaks within Q_fill (section 4);
  // with e0 = V - R T0 this is transient_bursts. (Where the stage empties
  // after a stalled burst 0, e0 < R G, the next bursts start cold again; the
  // closed form counts them as free: an approximation, see docs/model.md section 6.)
  const double R = p.R_Bps * 1e-9;  // bytes per ns
  const double burst0 = std::max(r.t0_ns, over_cold);
  const double e0 = burst0 > r.t0_ns ? std::min(p.Q_bytes, p.Q_cold_bytes) : V - R * r.t0_ns;
  const double growth = V - R * (r.t0_ns + G);  // > 0: not the free regime
  const double after0 = std::floor((p.fill_capacity() - V + R * r.t0_ns - e0 + R * G) / growth) + 1;
  const double n_free = 1 + std::max(0.0, after0);  // bursts [0, n_free) are not steady
  double sum = 0;
  if (first <= 0 && last > 0) sum += burst0;
  const double free_lo = std::max(1.0, double(first)), free_hi = std::min(double(last), n_free);
  const double free_count = std::max(0.0, free_hi - free_lo);
  const double steady_count = n - (first <= 0 && last > 0 ? 1.0 : 0.0) - free_count;
  sum += free_count * r.t0_ns + steady_count * r.t_iss_ns;
  return sum / n;
}

double single_burst_ns(const Profile& p, double K, double V) {
  return std::max(t0_iss_ns(p, K, V), p.t0.fixed_ns + (V - p.Q_bytes) / p.R_Bps * 1e9);
}

double completion_coupled_ns(const Profile& p, double K, double V, double /*G*/) {
  return std::max(t0_iss_ns(p, K, V), V / p.R_Bps * 1e9) + p.latency_ns;
}

double unbounded_async_ns(const Profile& p, double K, double V, double /*G*/) {
  return t0_iss_ns(p, K, V);
}

double model_issue_ns(ModelKind m, const Profile& p, double K, double V, double G) {
  switch (m) {
    case ModelKind::burst_gap: return predict(p, K, V, G).t_iss_ns;
    case ModelKind::completion_coupled: return completion_coupled_ns(p, K, V, G);
    case ModelKind::unbounded_async: return unbounded_async_ns(p, K, V, G);
  }
  return 0;
}

}  // namespace xstage
