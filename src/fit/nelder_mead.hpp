#pragma once
// A small Nelder-Mead minimiser: derivative-free, enough for five parameters.
#include <functional>
#include <vector>

namespace xstage::detail {

struct NelderMeadResult {
  std::vector<double> x;
  double f = 0;
  int iterations = 0;
};

NelderMeadResult nelder_mead(const std::function<double(const std::vector<double>&)>& f,
                             std::vector<double> x0, double step, int max_iter, double tol);

}  // namespace xstage::detail
