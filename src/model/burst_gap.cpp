#include <algorithm>
#include <cmath>

#include "xstage/error.hpp"
#include "xstage/model.hpp"

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
  return p.t0.fixed_ns + V / rate * 1e9;
}

namespace {
double gap_cap_ns(const Profile& p) { return std::max(0.0, p.Q_bytes / p.R_Bps * 1e9 - p.t0.fixed_ns); }
}  // namespace

Prediction predict(const Profile& p, double K, double V, double G) {
  if (!(K >= 1)) throw Error("predict: K must be >= 1");
  if (!(V > 0)) throw Error("predict: V must be > 0 bytes");
  if (!(G >= 0)) throw Error("predict: G must be >= 0 ns");
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

double windowed_issue_ns(const Profile& p, double K, double V, double G, long first, long last) {
  if (last <= first) throw Error("windowed_issue_ns: empty burst window");
  const Prediction r = predict(p, K, V, G);
  if (!std::isfinite(r.transient_bursts)) return r.t_iss_ns;
  const double n_free = std::clamp(r.transient_bursts - first, 0.0, double(last - first));
  return (n_free * r.t0_ns + (double(last - first) - n_free) * r.t_iss_ns) / double(last - first);
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
