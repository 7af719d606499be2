#pragma once
// Sweep plans for `xstage probe`: which (K, warps, V, G, store, gap kind)
// points to measure, and which set each belongs to:
//   train       the default configuration, fitted
//   holdout     the default configuration at V and G the fit never sees
//   completion  long gaps with a completion measurement (fence or flag): latency
//   explore     one factor away from the default (warps, store kind, gap kind, K)
#include <string>
#include <vector>

#include "xstage/probe.hpp"

namespace xstage::cli {

struct PlannedPoint {
  ProbePoint point;
  std::string set;
};

std::vector<PlannedPoint> plan_sweep(const std::string& sweep, Transport t, int sm_count);

}  // namespace xstage::cli
