#pragma once
// What paired timing (timing.hpp, paired_after_base_us) reports per
// configuration, and how the best configuration of a variant is chosen.
// Pure, so a CPU test checks them. Internal to src/runtime.
//
// Why the choice is by the paired residual and not by the median time: over
// a sweep's minutes the medians of configurations that run at different
// places in the round drift apart under the 700 W cap, by more than the
// store paths differ. On the H200 at host 16k (docs/perf-log.md f16) the
// median time picked a configuration 4.4% over attention-only, paired, while
// another one of the same run was 2.8%.
#include <algorithm>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <vector>

namespace xstage {

// Per round: a run's time over the base run just before it, minus 1.
inline std::vector<double> paired_residuals(const std::vector<double>& runs, const std::vector<double>& before) {
  if (runs.size() != before.size()) throw std::logic_error("paired_residuals: one base run per run");
  std::vector<double> rel;
  for (size_t r = 0; r < runs.size(); ++r) rel.push_back(runs[r] / before[r] - 1.0);
  return rel;
}

// The median (the upper one of an even count, as median_us in timing.hpp).
inline double median_value(std::vector<double> v) {
  if (v.empty()) throw std::logic_error("median_value: no values");
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Of the candidates, the one whose key is least (the first of equals); none
// when there are no candidates.
template <class Key>
std::optional<size_t> least_by(const std::vector<size_t>& candidates, Key key) {
  std::optional<size_t> best;
  for (size_t i : candidates)
    if (!best || key(i) < key(*best)) best = i;
  return best;
}

}  // namespace xstage
