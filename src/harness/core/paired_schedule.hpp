#pragma once
// The order of runs of paired timing (timing.hpp, paired_after_base_us): per
// round, for every body b but `base` (round r starts r bodies further along
// the others), base then b. One body alone: base once a round. Pure, so a
// CPU test checks that every other run follows a run of base.
//
// settled: each pair is preceded by one more run of base, so that both runs
// of the pair follow a run of base. (Adjacent pairs alone leave the pair's
// base run after the previous configuration, and the configuration after a
// base run; under a power cap a run's clock may depend on what ran before it.
// Measured on the H200, docs/perf-log.md f12: the residuals agree within a
// few tenths of a point.) Internal to src/runtime.
#include <cstddef>
#include <vector>

namespace xstage {

inline std::vector<size_t> paired_schedule(size_t n, size_t base, int rounds, bool settled = false) {
  std::vector<size_t> others, who;
  for (size_t b = 0; b < n; ++b)
    if (b != base) others.push_back(b);
  for (int r = 0; r < rounds; ++r) {
    if (others.empty()) who.push_back(base);
    for (size_t k = 0; k < others.size(); ++k) {
      if (settled) who.push_back(base);
      who.push_back(base);
      who.push_back(others[(k + size_t(r)) % others.size()]);
    }
  }
  return who;
}

}  // namespace xstage
