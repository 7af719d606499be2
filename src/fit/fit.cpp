#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "nelder_mead.hpp"
#include "stats.hpp"
#include "util/parallel_for.hpp"
#include "xstage/core/error.hpp"
#include "xstage/core/units.hpp"
#include "xstage/model/fit.hpp"

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

// The training samples as the objective sees them: one group per distinct
// (K, V, G, window), whose prediction is computed once per evaluation. A
// group's loss depends on the prediction u = log(predicted) alone,
//   L(u) = sum over members of log1p(((u - log t_i) / scale)^2),
// with each distinct measured value once, weighted by how often it was
// measured. A group of several values is tabulated once on a fine grid of u
// and looked up (linearly interpolated; the grid step is scale / 40, a
// relative error in L below 1e-4); outside the grid it is summed directly.
// A group of more than kPointsPerGroup distinct values is represented by as
// many evenly spaced quantiles, so that a probe CSV of millions of rows fits
// in the time of its distinct points. Far from every value (more than 20
// scales, where the optimiser's first steps land) L is smooth, and kFarPoints
// block means stand for the values: there log1p(z^2) bends by 2 / z^2 at
// most, a relative error in L below 1e-5 for values spread over a factor 2.
constexpr size_t kPointsPerGroup = 256;
constexpr size_t kGridPoints = 2048;
constexpr size_t kFarPoints = 16;
constexpr double kFarScales = 20;

struct FitGroup {
  const SamplePoint* key = nullptr;  // a member (its K, V, G, window)
  std::vector<double> log_t;         // log of the measured issue times (each distinct one, or quantiles)
  std::vector<double> weight;        // samples each of log_t stands for
  double members = 0;                // samples in the group
  double u0 = 0, du = 0;             // the grid: u0 + k du, k < kGridPoints (du = 0: no grid)
  std::vector<double> grid;          // L at the grid points
  std::vector<double> far_log_t, far_weight;  // block means of log_t and their weights (empty: log_t itself)
  double lo = 0, hi = 0;                      // the least and the largest log_t

  static double sum(const std::vector<double>& l, const std::vector<double>& w, double u, double scale) {
    double s = 0;
    for (size_t i = 0; i < l.size(); ++i) {
      const double z = (u - l[i]) / scale;
      s += w[i] * std::log1p(z * z);
    }
    return s;
  }
  double direct(double u, double scale) const { return sum(log_t, weight, u, scale); }
  double loss(double u, double scale) const {
    if (du > 0) {
      const double k = (u - u0) / du;
      if (k >= 0 && k < double(kGridPoints - 1)) {
        const size_t i = static_cast<size_t>(k);
        const double f = k - double(i);
        return grid[i] * (1 - f) + grid[i + 1] * f;
      }
    }
    if (!far_log_t.empty() && (u < lo - kFarScales * scale || u > hi + kFarScales * scale))
      return sum(far_log_t, far_weight, u, scale);
    return direct(u, scale);
  }
};

using GroupKey = std::tuple<double, double, double, long, long>;
GroupKey key_of(const SamplePoint& m) { return {m.K, m.V_bytes, m.gap_ns, m.bursts, m.steady_from}; }

std::vector<FitGroup> aggregate(const std::vector<const SamplePoint*>& s, double scale) {
  std::map<GroupKey, size_t> index;
  std::vector<FitGroup> groups;
  std::vector<std::vector<const SamplePoint*>> members;
  for (const SamplePoint* m : s) {
    auto [it, fresh] = index.emplace(key_of(*m), groups.size());
    if (fresh) {
      groups.emplace_back().key = m;
      members.emplace_back();
    }
    members[it->second].push_back(m);
  }
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    FitGroup& g = groups[gi];
    Tally merged;  // points of one group in several sets ("" and "train"): their values together
    if (members[gi].size() > 1) {
      for (const SamplePoint* m : members[gi]) merged.add(m->issue_ns);
      merged.finish();
    }
    const Tally& tally = members[gi].size() > 1 ? merged : members[gi].front()->issue_ns;
    const std::vector<Tally::Entry>& e = tally.entries();
    g.members = tally.count();
    if (e.size() <= kPointsPerGroup) {
      for (const Tally::Entry& x : e) {
        g.log_t.push_back(std::log(x.value));
        g.weight.push_back(x.count);
      }
    } else {  // the value at rank (i + 0.5) / kPointsPerGroup of the members, each standing for as many
      size_t k = 0;
      double below = 0;
      for (size_t i = 0; i < kPointsPerGroup; ++i) {
        const double rank = std::floor((double(i) + 0.5) / kPointsPerGroup * g.members);
        while (k + 1 < e.size() && below + e[k].count <= rank) below += e[k++].count;
        g.log_t.push_back(std::log(e[k].value));
        g.weight.push_back(g.members / kPointsPerGroup);
      }
    }
    const auto [lo, hi] = std::minmax_element(g.log_t.begin(), g.log_t.end());
    g.lo = *lo, g.hi = *hi;
    if (g.log_t.size() > kFarPoints) {  // log_t is sorted: blocks of consecutive values
      for (size_t b = 0; b < kFarPoints; ++b) {
        double w = 0, wl = 0;
        for (size_t i = b * g.log_t.size() / kFarPoints; i < (b + 1) * g.log_t.size() / kFarPoints; ++i)
          w += g.weight[i], wl += g.weight[i] * g.log_t[i];
        g.far_log_t.push_back(wl / w);
        g.far_weight.push_back(w);
      }
    }
  }
  // The grids, group by group on every core (each one costs kGridPoints sums over the group's values).
  parallel_for(groups.size(), [&](size_t gi) {
    FitGroup& g = groups[gi];
    if (g.log_t.size() < 3) return;  // a lookup saves nothing
    g.du = std::max((g.hi - g.lo + 40 * scale) / double(kGridPoints - 1), 0.0);
    g.du = std::min(g.du, scale / 40);
    g.u0 = 0.5 * (g.lo + g.hi) - 0.5 * g.du * double(kGridPoints - 1);
    g.grid.resize(kGridPoints);
    for (size_t k = 0; k < kGridPoints; ++k) g.grid[k] = g.direct(g.u0 + double(k) * g.du, scale);
  });
  return groups;
}

// The loss of a form's parameters. `fixed`: parameters held at a value (the
// drain limit left out), which the optimiser does not see: it moves the others.
struct Objective {
  const std::vector<FitGroup>* groups;
  const std::vector<double>* resample;  // per group: a multiplier of its weight (bootstrap), or null
  double scale;
  Form form;
  std::vector<std::pair<size_t, double>> fixed;  // (index, value), by index

  std::vector<double> full(const std::vector<double>& y) const {
    std::vector<double> x;
    x.reserve(y.size() + fixed.size());
    size_t j = 0, f = 0;
    for (size_t i = 0; i < y.size() + fixed.size(); ++i)
      x.push_back(f < fixed.size() && fixed[f].first == i ? fixed[f++].second : y[j++]);
    return x;
  }
  std::vector<double> reduced(const std::vector<double>& x) const {
    std::vector<double> y;
    size_t f = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (f < fixed.size() && fixed[f].first == i)
        ++f;
      else
        y.push_back(x[i]);
    }
    return y;
  }
  double operator()(const std::vector<double>& y) const {
    for (double v : y)
      if (!std::isfinite(v) || std::fabs(v) > 80) return 1e300;
    const Profile p = profile_of(fixed.empty() ? y : full(y), form);
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

struct Fitted {
  std::vector<double> x;  // all the form's parameters (the fixed ones included)
  double f = 1e301;
};

// The best of Nelder-Mead runs from every start (a start: all the form's parameters).
Fitted minimise(const Objective& obj, const std::vector<std::vector<double>>& starts, int iters) {
  std::vector<detail::NelderMeadResult> runs(starts.size());
  parallel_for(starts.size(), [&](size_t i) {
    auto r = detail::nelder_mead(obj, obj.reduced(starts[i]), 0.7, iters, 1e-12);
    runs[i] = detail::nelder_mead(obj, r.x, 0.15, iters, 1e-12);  // restart: escapes a collapsed simplex
  });
  Fitted best;
  for (const auto& r : runs)  // the first of the best, as a run one start after another would keep
    if (r.f < best.f) best = {obj.full(r.x), r.f};
  return best;
}

// Every measured value of the points with its count, as a function of the point and the value.
std::vector<detail::Weighted> weighted(const std::vector<const SamplePoint*>& s,
                                       const std::function<double(const SamplePoint&, double)>& f) {
  std::vector<detail::Weighted> out;
  for (const SamplePoint* m : s)
    for (const Tally::Entry& e : m->issue_ns.entries()) out.push_back({f(*m, e.value), e.count});
  return out;
}

// The drain limit left out: R and Q so large that no sample drains.
constexpr size_t kIndexR = 3, kIndexQ = 4;
const double kNoDrainLogR = std::log(1e17), kNoDrainLogQ = std::log(1e14);

std::vector<FitPoint> compare_points(const Profile& p, const std::vector<const SamplePoint*>& points, ModelKind model) {
  std::map<std::tuple<double, double, double>, std::vector<const SamplePoint*>> groups;
  for (const SamplePoint* s : points)
    if (!s->issue_ns.empty()) groups[{s->K, s->V_bytes, s->gap_ns}].push_back(s);
  std::vector<FitPoint> out;
  for (auto& [key, members] : groups) {
    FitPoint f;
    std::tie(f.K, f.V_bytes, f.gap_ns) = key;
    std::vector<detail::Weighted> v;
    double n = 0;
    for (const SamplePoint* s : members) {
      for (const Tally::Entry& e : s->issue_ns.entries()) v.push_back({e.value, e.count});
      n += s->issue_ns.count();
    }
    f.n = static_cast<long>(n);
    f.measured_ns = detail::weighted_quantile(v, 0.5);
    f.predicted_ns = model == ModelKind::burst_gap ? predicted_issue_ns(p, *members.front())
                                                   : model_issue_ns(model, p, f.K, f.V_bytes, f.gap_ns);
    f.rel_err = (f.predicted_ns - f.measured_ns) / f.measured_ns;
    f.regime = predict(p, f.K, f.V_bytes, f.gap_ns).regime;
    out.push_back(f);
  }
  return out;
}

}  // namespace

std::vector<FitPoint> compare(const Profile& p, const std::vector<SamplePoint>& points, ModelKind model) {
  std::vector<const SamplePoint*> all;
  for (const SamplePoint& s : points) all.push_back(&s);
  return compare_points(p, all, model);
}

FitResult fit_profile(const std::vector<Sample>& samples, const FitOptions& opt) {
  return fit_profile(group_samples(samples), opt);
}

FitResult fit_profile(const std::vector<SamplePoint>& all_points, const FitOptions& opt) {
  std::vector<const SamplePoint*> s;  // the training points
  double n_samples = 0;
  for (const SamplePoint& m : all_points)
    if (used_for_issue_fit(m.set) && !m.issue_ns.empty()) {
      s.push_back(&m);
      n_samples += m.issue_ns.count();
    }
  if (n_samples < 5)
    throw Error(fmt::format("fit: {} training samples; expected at least 5 (rows whose set is empty or 'train')", static_cast<long>(n_samples)));
  using detail::weighted_quantile;
  // Starting points from what each regime says on its own (one list at a time: they are as long as the values).
  const double R0 =
      weighted_quantile(weighted(s, [](const SamplePoint& m, double t) { return m.V_bytes / ((t + m.gap_ns) * 1e-9); }), 0.9);
  const double t_min = weighted_quantile(weighted(s, [](const SamplePoint&, double t) { return t; }), 0.0);
  const double prod_rate0 =
      weighted_quantile(weighted(s, [](const SamplePoint& m, double t) { return m.V_bytes / (m.K * t * 1e-9); }), 0.95);
  const double rate0 = weighted_quantile(weighted(s, [](const SamplePoint& m, double t) { return m.V_bytes / (t * 1e-9); }), 0.95);
  std::vector<Profile> base_starts;
  bool windowed = false;
  for (const SamplePoint* m : s) windowed |= m->bursts > 0;
  for (double qs : {0.5e-6, 5e-6, 50e-6, 500e-6})
    for (double fixed_frac : {0.1, 0.6})
      for (double fill : {1.0, 0.1, 0.01}) {
        if (!windowed && fill != 1.0) continue;  // the fill capacity only shows in windowed runs
        Profile p;
        p.t0.fixed_ns = fixed_frac * t_min;
        p.t0.per_producer_Bps = prod_rate0;
        p.t0.aggregate_Bps = rate0 * 1.2;
        p.R_Bps = R0;
        p.Q_bytes = R0 * qs;
        p.Q_fill_bytes = p.Q_bytes * fill;
        base_starts.push_back(p);
      }
  // Starting values of the extensions: a near queue of a few KiB per producer
  // at a few times the producer's rate; a cold capacity of a quarter or all of
  // a typical burst, regaining a tenth or all of what is stored.
  const double v_typical = weighted_quantile(weighted(s, [](const SamplePoint& m, double) { return m.V_bytes; }), 0.5);
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
  std::vector<Fitted> fitted(forms.size());
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
    fitted[fi] = minimise(Objective{&points, nullptr, opt.loss_scale, f, {}}, starts, 3000);
  }
  // BIC: the Cauchy loss is the negative log-likelihood of a Cauchy error up
  // to a constant, so an extra parameter must lower it by more than ln(n)/2.
  const double log_n = std::log(n_samples);
  size_t chosen = 0;
  auto bic = [&](size_t i) { return fitted[i].f + 0.5 * forms[i].params() * log_n; };
  for (size_t i = 1; i < forms.size(); ++i)
    if (bic(i) < bic(chosen)) chosen = i;
  const Form form = forms[chosen];

  // The drain limit by the same rule: refit without it (R and Q so large that
  // nothing drains); unless R and Q lower the loss by more than ln(n), the
  // issue rate alone explains the samples and R is not identified (a stage
  // that empties within every gap, or a saturating issue rate, looks like a
  // drain that starts at once: the rows cannot tell them apart).
  const Objective no_drain{&points, nullptr, opt.loss_scale, form, {{kIndexR, kNoDrainLogR}, {kIndexQ, kNoDrainLogQ}}};
  {
    std::vector<std::vector<double>> starts;
    std::vector<double> handed = fitted[chosen].x;  // R's part handed to the aggregate issue rate
    handed[2] = std::min(handed[2], handed[kIndexR]);
    starts.push_back(fitted[chosen].x);
    starts.push_back(handed);
    for (const Profile& b : base_starts) {
      std::vector<double> x = params_of(with_extensions(b, form, 0, 0), form);
      bool seen = false;  // R and Q held: starts differing only there are one start
      for (const auto& y : starts) seen |= no_drain.reduced(y) == no_drain.reduced(x);
      if (!seen) starts.push_back(x);
    }
    if (opt.progress) opt.progress("fitting without the drain limit");
    const Fitted free_only = minimise(no_drain, starts, 3000);
    if (!(free_only.f - fitted[chosen].f > log_n)) fitted[chosen] = free_only;
  }
  const bool drain_supported = fitted[chosen].x[kIndexR] != kNoDrainLogR;
  std::vector<double> x = fitted[chosen].x;
  Profile p = profile_of(x, form);

  FitResult res;
  res.samples = static_cast<long>(n_samples);
  res.near_queue = form.near;
  res.cold_start = form.cold;
  res.loss = fitted[chosen].f;
  if (opt.extensions && !form.near)
    res.notes.push_back("the near queue is not supported by the data (BIC): one-rate T0");
  if (opt.extensions && !windowed)
    res.notes.push_back("no sample says which bursts it averages (columns bursts, steady_from): no cold start fitted");
  else if (opt.extensions && !form.cold)
    res.notes.push_back("the cold start is not supported by the data (BIC): every empty stage offers Q");
  if (!drain_supported) {
    // The least drain rate that leaves every sample free (Q is bounded below further on).
    double r_least = 1.0;
    for (const SamplePoint* m : s)
      r_least = std::max(r_least, m->V_bytes / ((t0_iss_ns(p, m->K, m->V_bytes) + m->gap_ns) * 1e-9) * (1 + 1e-9));
    p.R_Bps = r_least;
  }

  // Outliers: log residual beyond 5 robust sigmas (and beyond 10%), each
  // distinct value of a point once, with its count.
  std::vector<std::vector<double>> logres(s.size());  // per point, per entry of its tally
  {
    std::map<GroupKey, double> pred;  // one prediction per group
    for (size_t i = 0; i < s.size(); ++i) {
      auto [it, fresh] = pred.emplace(key_of(*s[i]), 0.0);
      if (fresh) it->second = predicted_issue_ns(p, *s[i]);
      for (const Tally::Entry& e : s[i]->issue_ns.entries()) logres[i].push_back(std::log(it->second / e.value));
    }
  }
  // Each residual with its count, as a function of the residual.
  auto residuals = [&](const std::function<double(double)>& f) {
    std::vector<detail::Weighted> out;
    for (size_t i = 0; i < s.size(); ++i)
      for (size_t k = 0; k < logres[i].size(); ++k) out.push_back({f(logres[i][k]), s[i]->issue_ns.entries()[k].count});
    return out;
  };
  const double med = weighted_quantile(residuals([](double r) { return r; }), 0.5);
  const double sigma = 1.4826 * weighted_quantile(residuals([&](double r) { return std::fabs(r - med); }), 0.5);
  auto outlier = [&](size_t i, size_t k) { return std::fabs(logres[i][k]) > std::max(5 * sigma, 0.1); };
  double n_outliers = 0;
  std::vector<bool> has_inlier(s.size(), false);
  for (size_t i = 0; i < s.size(); ++i)
    for (size_t k = 0; k < logres[i].size(); ++k) {
      if (outlier(i, k))
        n_outliers += s[i]->issue_ns.entries()[k].count;
      else
        has_inlier[i] = true;
    }
  res.outliers = static_cast<long>(n_outliers);

  // What the data pins down.
  bool any_drain = false, any_capacity = false, any_saturated = false, any_unsaturated = false, any_fill = false;
  double q_lower = 0, max_K = 0;
  std::set<GroupKey> seen;  // each group once: the checks depend on it alone
  for (size_t i = 0; i < s.size(); ++i) {
    if (!has_inlier[i]) continue;
    const SamplePoint& m = *s[i];
    if (!seen.emplace(key_of(m)).second) continue;
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
  res.R_identified = drain_supported && any_drain;
  res.Q_identified = any_capacity;
  res.aggregate_identified = any_saturated;
  if (!drain_supported)
    res.notes.push_back(fmt::format("R is not identified: the samples fit as well without a drain limit (no gap "
                                    "lowers an issue time as a draining stage would); R is at least {}",
                                    format_rate(p.R_Bps)));
  else if (!any_drain)
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
  std::vector<detail::Weighted> lat;
  for (const SamplePoint& m : all_points) {
    const double busy = std::max(t0_iss_ns(p, m.K, m.V_bytes), m.V_bytes / p.R_Bps * 1e9);
    for (const Tally::Entry& e : m.complete_ns.entries()) lat.push_back({e.value - busy, e.count});
  }
  p.latency_ns = lat.empty() ? 0.0 : std::max(0.0, weighted_quantile(lat, 0.5));
  if (lat.empty()) res.notes.push_back("no complete_ns column: latency set to 0");

  // Bootstrap for one-sigma uncertainties: each resample draws the training
  // samples again with replacement (a group's weight scaled by how many of
  // its samples were drawn). A parameter the data do not pin down gets no
  // number: its spread would only reflect where the optimiser stopped.
  if (opt.bootstrap > 1) {
    const Objective& model = drain_supported ? Objective{&points, nullptr, opt.loss_scale, form, {}} : no_drain;
    std::mt19937 rng(opt.seed);
    std::vector<double> members(points.size());
    for (size_t g = 0; g < points.size(); ++g) members[g] = points[g].members;
    // The draws first, in order (one random stream), then the fits on every core.
    std::vector<std::vector<double>> shares(static_cast<size_t>(opt.bootstrap), std::vector<double>(points.size()));
    for (auto& group_share : shares) {
      // A multinomial draw of n samples over the groups, group by group
      // (binomials); a group's loss is scaled by its count over its size.
      double left = n_samples;
      long long left_n = static_cast<long long>(n_samples);
      for (size_t g = 0; g < points.size(); ++g) {
        const double p_g = left > 0 ? std::min(1.0, members[g] / left) : 0.0;
        const long long k = std::binomial_distribution<long long>(left_n, p_g)(rng);
        group_share[g] = double(k) / members[g];
        left -= members[g];
        left_n -= k;
      }
    }
    std::vector<std::vector<double>> draws(shares.size());
    std::atomic<int> done{0};
    std::mutex progress_mutex;
    parallel_for(shares.size(), [&](size_t b) {
      Objective obj = model;
      obj.resample = &shares[b];
      draws[b] = obj.full(detail::nelder_mead(obj, obj.reduced(x), 0.1, 1500, 1e-10).x);
      const int k = ++done;
      std::lock_guard<std::mutex> lock(progress_mutex);
      if (opt.progress) opt.progress(fmt::format("bootstrap {}/{}", k, opt.bootstrap));
    });
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
      *fields[k] = 0.5 * (detail::quantile(v, 0.84) - detail::quantile(v, 0.16));
    }
    if (!res.R_identified) u.R_Bps = kNotIdentified;
    if (!res.Q_identified) u.Q_bytes = kNotIdentified;
    if (!res.aggregate_identified) u.aggregate_Bps = kNotIdentified;
    if (!any_fill) u.Q_fill_bytes = kNotIdentified;
    p.sigma = u;
  }

  double kmin = 1e300, kmax = 0, vmin = 1e300, vmax = 0;
  for (const SamplePoint* m : s) {
    kmin = std::min(kmin, m->K);
    kmax = std::max(kmax, m->K);
    vmin = std::min(vmin, m->V_bytes);
    vmax = std::max(vmax, m->V_bytes);
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

  res.points = compare_points(p, s, ModelKind::burst_gap);
  std::vector<detail::Weighted> abserr;
  std::map<std::tuple<double, double, double>, double> out_by_group;
  for (size_t i = 0; i < s.size(); ++i)
    for (size_t k = 0; k < logres[i].size(); ++k) {
      const double count = s[i]->issue_ns.entries()[k].count;
      if (outlier(i, k))
        out_by_group[{s[i]->K, s[i]->V_bytes, s[i]->gap_ns}] += count;
      else
        abserr.push_back({std::fabs(std::exp(logres[i][k]) - 1.0), count});
    }
  for (FitPoint& f : res.points) f.outliers = static_cast<long>(out_by_group[{f.K, f.V_bytes, f.gap_ns}]);
  res.median_abs_rel_err = weighted_quantile(abserr, 0.5);
  return res;
}

}  // namespace xstage
