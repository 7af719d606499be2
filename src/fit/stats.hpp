#pragma once
// Small statistics shared by the fitter and the validation.
#include <algorithm>
#include <cmath>
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

struct Weighted {
  double value = 0, count = 0;
};

// quantile() of the values each repeated `count` times (whole counts), without
// repeating them: the same number as quantile() of the list written out.
inline double weighted_quantile(std::vector<Weighted> v, double q) {
  double n = 0;
  for (const Weighted& w : v) n += w.count;
  if (v.empty() || !(n > 0)) return 0.0;
  std::sort(v.begin(), v.end(), [](const Weighted& a, const Weighted& b) { return a.value < b.value; });
  const double pos = q * (n - 1);
  const double i = std::floor(pos), f = pos - i;
  size_t k = 0;  // v[k] holds rank i: the ranks below it are `below`
  double below = 0;
  while (k + 1 < v.size() && below + v[k].count <= i) below += v[k++].count;
  const double at = v[k].value;
  if (f == 0) return at;
  const double next = below + v[k].count > i + 1 || k + 1 == v.size() ? at : v[k + 1].value;
  return at * (1 - f) + next * f;
}

}  // namespace xstage::detail
