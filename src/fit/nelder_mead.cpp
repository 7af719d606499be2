#include "nelder_mead.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace xstage::detail {

NelderMeadResult nelder_mead(const std::function<double(const std::vector<double>&)>& f,
                             std::vector<double> x0, double step, int max_iter, double tol) {
  const size_t n = x0.size();
  std::vector<std::vector<double>> pts(n + 1, x0);
  for (size_t i = 0; i < n; ++i) pts[i + 1][i] += step;
  std::vector<double> fv(n + 1);
  for (size_t i = 0; i <= n; ++i) fv[i] = f(pts[i]);
  std::vector<size_t> order(n + 1);
  int it = 0;
  for (; it < max_iter; ++it) {
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return fv[a] < fv[b]; });
    const size_t best = order[0], worst = order[n], second = order[n - 1];
    if (std::fabs(fv[worst] - fv[best]) <= tol * (std::fabs(fv[best]) + 1e-12)) break;
    std::vector<double> c(n, 0.0);
    for (size_t i = 0; i <= n; ++i)
      if (i != worst)
        for (size_t d = 0; d < n; ++d) c[d] += pts[i][d] / n;
    auto along = [&](double t) {
      std::vector<double> p(n);
      for (size_t d = 0; d < n; ++d) p[d] = c[d] + t * (pts[worst][d] - c[d]);
      return p;
    };
    auto xr = along(-1.0);
    const double fr = f(xr);
    if (fr < fv[best]) {
      auto xe = along(-2.0);
      const double fe = f(xe);
      if (fe < fr) { pts[worst] = xe; fv[worst] = fe; } else { pts[worst] = xr; fv[worst] = fr; }
    } else if (fr < fv[second]) {
      pts[worst] = xr;
      fv[worst] = fr;
    } else {
      auto xc = fr < fv[worst] ? along(-0.5) : along(0.5);
      const double fc = f(xc);
      if (fc < std::min(fr, fv[worst])) {
        pts[worst] = xc;
        fv[worst] = fc;
      } else {  // shrink towards the best point
        for (size_t i = 0; i <= n; ++i) {
          if (i == best) continue;
          for (size_t d = 0; d < n; ++d) pts[i][d] = pts[best][d] + 0.5 * (pts[i][d] - pts[best][d]);
          fv[i] = f(pts[i]);
        }
      }
    }
  }
  const size_t b = static_cast<size_t>(std::min_element(fv.begin(), fv.end()) - fv.begin());
  return {pts[b], fv[b], it};
}

}  // namespace xstage::detail
