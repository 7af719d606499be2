#pragma once
// Held-out validation: fit on the training rows, predict rows of V and G the
// fit never saw, with the Burst-Gap model and both counterfactuals.
#include <array>
#include <vector>

#include "xstage/model/fit.hpp"

namespace xstage {

inline constexpr std::array<ModelKind, 3> kAllModels = {ModelKind::burst_gap, ModelKind::completion_coupled,
                                                        ModelKind::unbounded_async};

struct ErrorSummary {
  double median_rel_err = 0;  // of |predicted - measured| / measured, a fraction
  double p90_rel_err = 0;
  int points = 0;
};

struct HeldOutPoint {
  double K = 0, V_bytes = 0, gap_ns = 0;
  double measured_ns = 0;
  std::array<double, 3> predicted_ns{};  // in kAllModels order
  std::array<double, 3> rel_err{};
  Regime regime = Regime::free;  // Burst-Gap's
};

// The backpressure onset of one (K, V) series: where issue time stops falling
// with the gap. Measured by fitting the hinge max(a, b - G) to that series
// alone (G* = b - a); predicted by fitting the same hinge to the profile's
// prediction of the same samples (the windowed run means, at the same gaps),
// so that what the estimator does to a run's transient and cold start cancels.
struct OnsetCheck {
  double K = 0, V_bytes = 0;
  double measured_ns = 0, predicted_ns = 0, rel_err = 0;
  double steady_ns = 0;  // the closed-form steady-state onset V/R - T0 (predict().onset_gap_ns)
};

struct Validation {
  FitResult fit;
  std::vector<HeldOutPoint> points;
  std::array<ErrorSummary, 3> errors{};  // in kAllModels order
  std::vector<OnsetCheck> onsets;
  double onset_gap_err = 0;         // median |rel err| over the onsets (like with like, OnsetCheck)
  double onset_gap_err_steady = 0;  // the same against the closed-form steady onset V/R - T0
};

// Samples whose set is "holdout" are validated; the rest are fitted
// (fit_profile's rules). Throws xstage::Error when there is no held-out row.
Validation validate_holdout(const std::vector<SamplePoint>& points, const FitOptions& opt = {});
Validation validate_holdout(const std::vector<Sample>& samples, const FitOptions& opt = {});

// The measured onset of one series (points of one K and V); < 0 when the
// series shows no onset inside its gap range.
double measured_onset_ns(std::vector<std::pair<double, double>> gap_and_issue_ns);

}  // namespace xstage
