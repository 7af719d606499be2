#pragma once
// Small statistics shared by the fitter and the validation.
#include <algorithm>
#include <vector>

namespace xstage::detail {

// Linear-interpolated quantile q in [0, 1] of v (0 for an empty v).
// Selection, not a sort: linear in v's size (a probe CSV may have millions of rows).
inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  const double pos = q * (v.size() - 1);
  const size_t i = static_cast<size_t>(pos);
  const double f = pos - i;
  std::nth_element(v.begin(), v.begin() + i, v.end());
  if (i + 1 >= v.size()) return v[i];
  const double next = *std::min_element(v.begin() + i + 1, v.end());  // the (i+1)-th smallest
  return v[i] * (1 - f) + next * f;
}

}  // namespace xstage::detail
