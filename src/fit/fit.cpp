#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "nelder_mead.hpp"
#include "stats.hpp"
#include "xstage/error.hpp"
#include "xstage/fit.hpp"
#include "xstage/units.hpp"

namespace xstage {
namespace {

// The forms the fitter tries: the one-rate T0 without a cold start, and that
// form with the near queue, with the cold start, or with both.
struct Form {
  bool near = false, cold = false;
  int params() const { return 6 + (near ? 2 : 0) + (cold ? 2 : 0); }
};

// Parameters, all logarithms: fixed+1, per_producer, aggregate, R, Q, Q_fill,
// then [near_bytes, near_per_producer] with the near queue, then [Q_cold, Q_warm_per_byte] with the cold start.
Profile profile_of(const std::vector<double>& x, Form f) {
  Profile p;
  p.t0.fixed_ns = std::max(0.0, std::exp(x[0]) - 1.0);
  p.t0.per_producer_Bps = std::exp(x[1]);
  p.t0.aggregate_Bps = std::exp(x[2]);
  p.R_Bps = std::exp(x[3]);
  p.Q_bytes = std::exp(x[4]);
  p.Q_fill_bytes = std::min(std::exp(x[5]), p.Q_bytes);  // an empty stage fills to at most Q
  size_t i = 6;
  if (f.near) {
    p.t0.near_bytes = std::exp(x[i++]);
    p.t0.near_per_producer_Bps = std::exp(x[i++]);
  }
  if (f.cold) {
    p.Q_cold_bytes = std::min(std::exp(x[i++]), p.Q_bytes);  // a cold stage offers at most Q
    p.Q_warm_per_byte = std::exp(x[i++]);
  }
  return p;
}

std::vector<double> params_of(const Profile& p, Form f) {
  std::vector<double> x{std::log(p.t0.fixed_ns + 1.0), std::log(p.t0.per_producer_Bps), std::log(p.t0.aggregate_Bps),
                        std::log(p.R_Bps), std::log(p.Q_bytes), std::log(p.fill_capacity())};
  if (f.near) {
    x.push_back(std::log(p.t0.near_bytes));
    x.push_back(std::log(p.t0.near_per_producer_Bps));
  }
  if (f.cold) {
    x.push_back(std::log(p.Q_cold_bytes));
    x.push_back(std::log(p.Q_warm_per_byte));
  }
  return x;
}

using detail::quantile;

// The training samples as the objective sees them: one group per distinct
// (K, V, G, window), whose prediction is computed once per evaluation. A
// group's loss depends on the prediction u = log(predicted) alone,
//   L(u) = sum over members of log1p(((u - log t_i) / scale)^2),
// so a group of several samples is tabulated once on a fine grid of u and
// looked up (linearly interpolated; the grid step is scale / 40, a relative
// error in L below 1e-4); outside the grid it is summed directly. Members are
// represented by at most kPointsPerGroup evenly spaced quantiles, so that a
// probe CSV of millions of repeated rows fits in the time of its distinct
// points.
constexpr size_t kPointsPerGroup = 256;
constexpr size_t kGridPoints = 2048;

struct FitGroup {
  const Sample* key = nullptr;  // a member (its K, V, G, window)
  std::vector<double> log_t;    // log of the measured issue times (all, or quantiles)
  double weight = 1;            // samples each of log_t stands for
  double u0 = 0, du = 0;        // the grid: u0 + k du, k < kGridPoints (du = 0: no grid)
  std::vector<double> grid;     // L at the grid points

  double direct(double u, double scale) const {
    double sum = 0;
    for (double l : log_t) {
      const double z = (u - l) / scale;
      sum += std::log1p(z * z);
    }
    return weight * sum;
  }
  double loss(double u, double scale) const {
    if (du > 0) {
      const double k = (u - u0) / du;
      if (k >= 0 && k < double(kGridPoints - 1)) {
        const size_t i = static_cast<size_t>(k);
        const double f = k - double(i);
        return grid[i] * (1 - f) + grid[i + 1] * f;
      }
    }
    return direct(u, scale);
  }
};

std::vector<FitGroup> aggregate(const std::vector<Sample>& s, double scale) {
  using Key = std::tuple<double, double, double, long, long>;
  std::map<Key, size_t> index;
  std::vector<FitGroup> groups;
  for (const Sample& m : s) {
    auto [it, fresh] = index.emplace(Key{m.K, m.V_bytes, m.gap_ns, m.bursts, m.steady_from}, groups.size());
    if (fresh) groups.push_back(FitGroup{&m});
    groups[it->second].log_t.push_back(std::log(m.issue_ns));
  }
  for (FitGroup& g : groups) {
    std::vector<double>& v = g.log_t;
    if (v.size() > kPointsPerGroup) {
      std::sort(v.begin(), v.end());
      std::vector<double> q(kPointsPerGroup);
      for (size_t i = 0; i < kPointsPerGroup; ++i)
        q[i] = v[static_cast<size_t>((double(i) + 0.5) / kPointsPerGroup * double(v.size()))];
      g.weight = double(v.size()) / kPointsPerGroup;
      v = std::move(q);
    }
    if (v.size() < 3) continue;  // a lookup saves nothing
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    g.du = std::max((*hi - *lo + 40 * scale) / double(kGridPoints - 1), 0.0);
    g.du = std::min(g.du, scale / 40);
    g.u0 = 0.5 * (*lo + *hi) - 0.5 * g.du * double(kGridPoints - 1);
    g.grid.resize(kGridPoints);
    for (size_t k = 0; k < kGridPoints; ++k) g.grid[k] = g.direct(g.u0 + double(k) * g.du, scale);
  }
  return groups;
}

struct Objective {
  const std::vector<FitGroup>* groups;
  const std::vector<double>* resample;  // per group: a multiplier of its weight (bootstrap), or null
  double scale;
  Form form;
  double operator()(const std::vector<double>& x) const {
    for (double v : x)
      if (!std::isfinite(v) || std::fabs(v) > 80) return 1e300;
    const Profile p = profile_of(x, form);
    double loss = 0;
    for (size_t g = 0; g < groups->size(); ++g) {
      const double m = resample ? (*resample)[g] : 1.0;
      if (m == 0) continue;
      const FitGroup& fg = (*groups)[g];
      loss += m * fg.loss(std::log(predicted_issue_ns(p, *fg.key)), scale);
    }
    return loss;
  }
};

detail::NelderMeadResult minimise(const Objective& obj, const std::vector<std::vector<double>>& starts, int iters) {
  detail::NelderMeadResult best;
  best.f = 1e301;
  for (auto& x0 : starts) {
    auto r = detail::nelder_mead(obj, x0, 0.7, iters, 1e-12);
    r = detail::nelder_mead(obj, r.x, 0.15, iters, 1e-12);  // restart: escapes a collapsed simplex
    if (r.f < best.f) best = r;
  }
  return best;
}

}  // namespace

std::vector<FitPoint> compare(const Profile& p, const std::vector<Sample>& samples, ModelKind model) {
  std::map<std::tuple<double, double, double>, std::vector<const Sample*>> groups;
  for (const Sample& s : samples) groups[{s.K, s.V_bytes, s.gap_ns}].push_back(&s);
  std::vector<FitPoint> out;
  for (auto& [key, members] : groups) {
    FitPoint f;
    std::tie(f.K, f.V_bytes, f.gap_ns) = key;
    f.n = static_cast<int>(members.size());
    std::vector<double> v;
    for (const Sample* s : members) v.push_back(s->issue_ns);
    f.measured_ns = quantile(v, 0.5);
    f.predicted_ns = model == ModelKind::burst_gap ? predicted_issue_ns(p, *members.front())
                                                   : model_issue_ns(model, p, f.K, f.V_bytes, f.gap_ns);
    f.rel_err = (f.predicted_ns - f.measured_ns) / f.measured_ns;
    f.regime = predict(p, f.K, f.V_bytes, f.gap_ns).regime;
    out.push_back(f);
  }
  return out;
}

FitResult fit_profile(const std::vector<Sample>& all_samples, const FitOptions& opt) {
  std::vector<Sample> s;
  for (const Sample& m : all_samples)
    if (used_for_issue_fit(m)) s.push_back(m);
  if (s.size() < 5) throw Error(fmt::format("fit: {} training samples; need at least 5", s.size()));
  // Starting points from what each regime says on its own.
  std::vector<double> drain_rate, rate, prod_rate, times;
  for (const Sample& m : s) {
    drain_rate.push_back(m.V_bytes / ((m.issue_ns + m.gap_ns) * 1e-9));
    rate.push_back(m.V_bytes / (m.issue_ns * 1e-9));
    prod_rate.push_back(m.V_bytes / (m.K * m.issue_ns * 1e-9));
    times.push_back(m.issue_ns);
  }
  const double R0 = quantile(drain_rate, 0.9);
  std::vector<Profile> base_starts;
  bool windowed = false;
  for (const Sample& m : s) windowed |= m.bursts > 0;
  for (double qs : {0.5e-6, 5e-6, 50e-6, 500e-6})
    for (double fixed_frac : {0.1, 0.6})
      for (double fill : {1.0, 0.1, 0.01}) {
        if (!windowed && fill != 1.0) continue;  // the fill capacity only shows in windowed runs
        Profile p;
        p.t0.fixed_ns = fixed_frac * quantile(times, 0.0);
        p.t0.per_producer_Bps = quantile(prod_rate, 0.95);
        p.t0.aggregate_Bps = quantile(rate, 0.95) * 1.2;
        p.R_Bps = R0;
        p.Q_bytes = R0 * qs;
        p.Q_fill_bytes = p.Q_bytes * fill;
        base_starts.push_back(p);
      }
  // Starting values of the extensions: a near queue of a few KiB per producer
  // at a few times the producer's rate; a cold capacity of a quarter or all of
  // a typical burst, regaining a tenth or all of what is stored.
  std::vector<double> volumes;
  for (const Sample& m : s) volumes.push_back(m.V_bytes);
  const double v_typical = quantile(volumes, 0.5);
  auto with_extensions = [&](Profile p, Form f, int near_i, int cold_i) {
    if (f.near) {
      p.t0.near_bytes = near_i == 0 ? 4096.0 : 16384.0;
      p.t0.near_per_producer_Bps = 3 * p.t0.per_producer_Bps;
    }
    if (f.cold) {
      p.Q_cold_bytes = std::min(p.Q_bytes, (cold_i & 1 ? 1.0 : 0.25) * v_typical);
      p.Q_warm_per_byte = cold_i & 2 ? 1.0 : 0.1;
    }
    return p;
  };
  const std::vector<FitGroup> points = aggregate(s, opt.loss_scale);
  std::vector<Form> forms{{false, false}};
  if (opt.extensions) {
    forms.push_back({true, false});
    if (windowed) {  // the cold start only shows in runs that say which bursts they average
      forms.push_back({false, true});
      forms.push_back({true, true});
    }
  }
  // Fit every form; a form with an extension also starts from the best fit of
  // each form it extends, so that its loss is never worse than theirs.
  std::vector<detail::NelderMeadResult> fitted(forms.size());
  for (size_t fi = 0; fi < forms.size(); ++fi) {
    const Form f = forms[fi];
    std::vector<std::vector<double>> starts;
    for (const Profile& b : base_starts)
      for (int ni = 0; ni < (f.near ? 2 : 1); ++ni)
        for (int ci = 0; ci < (f.cold ? 4 : 1); ++ci) starts.push_back(params_of(with_extensions(b, f, ni, ci), f));
    for (size_t gi = 0; gi < fi; ++gi) {
      const Form g = forms[gi];
      if ((g.near && !f.near) || (g.cold && !f.cold)) continue;  // g is not nested in f
      const Profile pg = profile_of(fitted[gi].x, g);
      for (int ni = 0; ni < (f.near && !g.near ? 2 : 1); ++ni)
        for (int ci = 0; ci < (f.cold && !g.cold ? 4 : 1); ++ci) {
          Profile q = pg;
          if (f.near && !g.near) q = with_extensions(q, {true, false}, ni, 0);
          if (f.cold && !g.cold) q = with_extensions(q, {false, true}, 0, ci);
          starts.push_back(params_of(q, f));
        }
    }
    if (opt.progress) opt.progress(fmt::format("fitting form {}/{}", fi + 1, forms.size()));
    fitted[fi] = minimise(Objective{&points, nullptr, opt.loss_scale, f}, starts, 3000);
  }
  // BIC: the Cauchy loss is the negative log-likelihood of a Cauchy error up
  // to a constant, so an extra parameter must lower it by more than ln(n)/2.
  size_t chosen = 0;
  auto bic = [&](size_t i) { return fitted[i].f + 0.5 * forms[i].params() * std::log(double(s.size())); };
  for (size_t i = 1; i < forms.size(); ++i)
    if (bic(i) < bic(chosen)) chosen = i;
  const Form form = forms[chosen];
  std::vector<double> x = fitted[chosen].x;
  Profile p = profile_of(x, form);

  FitResult res;
  res.samples = static_cast<int>(s.size());
  res.near_queue = form.near;
  res.cold_start = form.cold;
  res.loss = fitted[chosen].f;
  if (opt.extensions && !form.near)
    res.notes.push_back("the near queue is not supported by the data (BIC): one-rate T0");
  if (opt.extensions && !windowed)
    res.notes.push_back("no sample says which bursts it averages (columns bursts, steady_from): no cold start fitted");
  else if (opt.extensions && !form.cold)
    res.notes.push_back("the cold start is not supported by the data (BIC): every empty stage offers Q");

  // Outliers: log residual beyond 5 robust sigmas (and beyond 10%).
  std::vector<double> logres;
  logres.reserve(s.size());
  {
    std::map<std::tuple<double, double, double, long, long>, double> pred;  // one prediction per group
    for (const Sample& m : s) {
      auto [it, fresh] = pred.emplace(std::tuple{m.K, m.V_bytes, m.gap_ns, m.bursts, m.steady_from}, 0.0);
      if (fresh) it->second = predicted_issue_ns(p, m);
      logres.push_back(std::log(it->second / m.issue_ns));
    }
  }
  std::vector<double> absdev;
  const double med = quantile(logres, 0.5);
  for (double r : logres) absdev.push_back(std::fabs(r - med));
  const double sigma = 1.4826 * quantile(absdev, 0.5);
  std::vector<bool> outlier(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    outlier[i] = std::fabs(logres[i]) > std::max(5 * sigma, 0.1);
    res.outliers += outlier[i];
  }

  // What the data pins down.
  bool any_drain = false, any_capacity = false, any_saturated = false, any_unsaturated = false, any_fill = false;
  double q_lower = 0, max_K = 0;
  std::set<std::tuple<double, double, double, long, long>> seen;  // each group once: the checks depend on it alone
  for (size_t i = 0; i < s.size(); ++i) {
    if (outlier[i]) continue;
    const Sample& m = s[i];
    if (!seen.emplace(m.K, m.V_bytes, m.gap_ns, m.bursts, m.steady_from).second) continue;
    const Prediction pr = predict(p, m.K, m.V_bytes, m.gap_ns);
    max_K = std::max(max_K, m.K);
    const bool drain = pr.drain_ns > pr.t0_ns * 1.02;
    any_drain |= drain;
    if (drain && m.gap_ns >= pr.gap_cap_ns) any_capacity = true;
    // The fill capacity shows only where a run's window sees the end of the transient.
    if (m.bursts > 0 && std::isfinite(pr.transient_bursts) && pr.transient_bursts > m.steady_from &&
        pr.transient_bursts < m.bursts)
      any_fill = true;
    // What Q must be at least: a stage that did not empty during the gap held R (G + fixed); a burst into
    // an empty (warm) stage that did not stall absorbed V - R (T0 - fixed).
    if (drain && m.gap_ns < pr.gap_cap_ns) q_lower = std::max(q_lower, (m.gap_ns + p.t0.fixed_ns) * 1e-9 * p.R_Bps);
    if (pr.regime == Regime::free)
      q_lower = std::max(q_lower, m.V_bytes - p.R_Bps * (pr.t0_ns - p.t0.fixed_ns) * 1e-9);
    // The producers' rate saturates, or the near queue's (where the near queue takes a share of the burst).
    const bool saturated = m.K * p.t0.per_producer_Bps > p.t0.aggregate_Bps * 1.02;
    const bool near_saturated = form.near && m.K * p.t0.near_per_producer_Bps > p.t0.aggregate_Bps * 1.02;
    any_saturated |= saturated || near_saturated;
    any_unsaturated |= !saturated;
  }
  res.R_identified = any_drain;
  res.Q_identified = any_capacity;
  res.aggregate_identified = any_saturated;
  if (!any_drain)
    res.notes.push_back("R is not identified: no sample is drain-limited (use larger V or shorter gaps)");
  if (!any_capacity) {
    p.Q_bytes = std::max(q_lower, 1.0);
    res.notes.push_back(fmt::format(
        "Q is a lower bound ({}): no burst overflowed a drained stage (use V larger than Q with long gaps)",
        format_bytes(p.Q_bytes)));
  }
  p.Q_fill_bytes = std::min(p.Q_fill_bytes, p.Q_bytes);
  p.Q_cold_bytes = std::min(p.Q_cold_bytes, p.Q_bytes);
  if (!any_fill) {
    p.Q_fill_bytes = 0;  // the same as Q
    res.notes.push_back("the fill capacity is not identified (no run ends its transient inside its window): Q_fill = Q");
  }
  if (!any_saturated) {
    const double top_rate = std::max(p.t0.per_producer_Bps, form.near ? p.t0.near_per_producer_Bps : 0.0);
    p.t0.aggregate_Bps = std::max(top_rate, max_K * top_rate);
    res.notes.push_back("the aggregate issue rate was not reached: set to K_max x the per-producer rate");
  }
  if (!any_unsaturated)
    res.notes.push_back("every sample saturates the aggregate issue rate: the per-producer rate is a lower bound");

  // Latency for the completion-coupled counterfactual: visibility time beyond the issue-or-drain time.
  std::vector<double> lat;
  for (const Sample& m : all_samples)
    if (m.complete_ns >= 0)
      lat.push_back(m.complete_ns - std::max(t0_iss_ns(p, m.K, m.V_bytes), m.V_bytes / p.R_Bps * 1e9));
  p.latency_ns = lat.empty() ? 0.0 : std::max(0.0, quantile(lat, 0.5));
  if (lat.empty()) res.notes.push_back("no complete_ns column: latency set to 0");

  // Bootstrap for one-sigma uncertainties: each resample draws the training
  // samples again with replacement (a group's weight scaled by how many of
  // its samples were drawn). A parameter the data do not pin down gets no
  // number: its spread would only reflect where the optimiser stopped.
  if (opt.bootstrap > 1) {
    std::mt19937 rng(opt.seed);
    std::vector<double> group_share(points.size());
    std::vector<double> members(points.size());
    for (size_t g = 0; g < points.size(); ++g) members[g] = points[g].weight * double(points[g].log_t.size());
    const double n_total = static_cast<double>(s.size());
    std::vector<std::vector<double>> draws;
    for (int b = 0; b < opt.bootstrap; ++b) {
      if (opt.progress) opt.progress(fmt::format("bootstrap {}/{}", b + 1, opt.bootstrap));
      // A multinomial draw of n samples over the groups, group by group
      // (binomials); a group's loss is scaled by its count over its size.
      double left = n_total;
      long long left_n = static_cast<long long>(s.size());
      for (size_t g = 0; g < points.size(); ++g) {
        const double p_g = left > 0 ? std::min(1.0, members[g] / left) : 0.0;
        const long long k = std::binomial_distribution<long long>(left_n, p_g)(rng);
        group_share[g] = double(k) / members[g];
        left -= members[g];
        left_n -= k;
      }
      const Objective obj{&points, &group_share, opt.loss_scale, form};
      auto r = detail::nelder_mead(obj, x, 0.1, 1500, 1e-10);
      draws.push_back(r.x);
    }
    Uncertainty u;
    double* fields[] = {&u.fixed_ns,   &u.per_producer_Bps,      &u.aggregate_Bps, &u.R_Bps,
                        &u.Q_bytes,    &u.Q_fill_bytes,          &u.near_bytes,    &u.near_per_producer_Bps,
                        &u.Q_cold_bytes, &u.Q_warm_per_byte};
    for (int k = 0; k < 10; ++k) {
      if ((k == 6 || k == 7) && !form.near) continue;
      if ((k == 8 || k == 9) && !form.cold) continue;
      std::vector<double> v;
      for (auto& d : draws) {
        const Profile q = profile_of(d, form);
        const double vals[] = {q.t0.fixed_ns,   q.t0.per_producer_Bps,      q.t0.aggregate_Bps, q.R_Bps,
                               q.Q_bytes,       q.fill_capacity(),          q.t0.near_bytes,    q.t0.near_per_producer_Bps,
                               q.Q_cold_bytes,  q.Q_warm_per_byte};
        v.push_back(vals[k]);
      }
      // Robust spread (half the 16-84 percentile range) so one wild resample does not dominate.
      *fields[k] = 0.5 * (quantile(v, 0.84) - quantile(v, 0.16));
    }
    if (!res.R_identified) u.R_Bps = kNotIdentified;
    if (!res.Q_identified) u.Q_bytes = kNotIdentified;
    if (!res.aggregate_identified) u.aggregate_Bps = kNotIdentified;
    if (!any_fill) u.Q_fill_bytes = kNotIdentified;
    p.sigma = u;
  }

  double kmin = 1e300, kmax = 0, vmin = 1e300, vmax = 0;
  for (const Sample& m : s) {
    kmin = std::min(kmin, m.K);
    kmax = std::max(kmax, m.K);
    vmin = std::min(vmin, m.V_bytes);
    vmax = std::max(vmax, m.V_bytes);
  }
  p.K_range = Range{kmin, kmax};
  p.V_range = Range{vmin, vmax};
  p.status = "measured";
  p.name = "fitted";
  // The extensions kept, in words (the one-line T0 summaries show the one-rate part only).
  if (form.near)
    res.notes.push_back(fmt::format("T0 has a near queue: each producer's first {} at {} (then {})",
                                    format_bytes(p.t0.near_bytes), format_rate(p.t0.near_per_producer_Bps),
                                    format_rate(p.t0.per_producer_Bps)));
  if (form.cold)
    res.notes.push_back(fmt::format("cold start: an empty stage after a long idle absorbs {}, regaining {:.3f} B of "
                                    "capacity per B stored, up to Q",
                                    format_bytes(p.Q_cold_bytes), p.Q_warm_per_byte));
  res.profile = p;

  res.points = compare(p, s, ModelKind::burst_gap);
  std::vector<double> abserr;
  for (size_t i = 0; i < s.size(); ++i)
    if (!outlier[i]) abserr.push_back(std::fabs(std::exp(logres[i]) - 1.0));
  std::map<std::tuple<double, double, double>, int> out_by_group;
  for (size_t i = 0; i < s.size(); ++i)
    if (outlier[i]) ++out_by_group[{s[i].K, s[i].V_bytes, s[i].gap_ns}];
  for (FitPoint& f : res.points) f.outliers = out_by_group[{f.K, f.V_bytes, f.gap_ns}];
  res.median_abs_rel_err = quantile(abserr, 0.5);
  return res;
}

}  // namespace xstage
