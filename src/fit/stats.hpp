#pragma once
// Small statistics shared by the fitter and the validation.
#include <algorithm>
#include <vector>

namespace xstage::detail {

// Linear-interpolated quantile q in [0, 1] of v (0 for an empty v).
inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = q * (v.size() - 1);
  const size_t i = static_cast<size_t>(pos);
  const double f = pos - i;
  return i + 1 < v.size() ? v[i] * (1 - f) + v[i + 1] * f : v[i];
}

}  // namespace xstage::detail
