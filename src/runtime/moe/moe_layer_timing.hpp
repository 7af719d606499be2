#pragma once
// Paired rounds of the MoE layer's variants (internal to src/runtime): every
// round runs every body once, round r starting r bodies further along (so
// that the GPU's clock drifting under a long load reaches every body alike
// and per-round ratios of two bodies pair runs of one GPU state); each run
// is timed by CUDA events on the lead stream at its phase boundaries, the
// ranks' streams joined there and forked again (fork/join, world.hpp); the
// SM clock is measured after every round (SM cycles over the global timer
// for 200 us: the clock the round ended at, under the power cap).
#include <array>
#include <utility>
#include <vector>

#include "xstage/moe_layer.hpp"

namespace xstage {

struct MoeRounds {
  // [body][round]: the run (ms) and its phases dispatch, experts, combine;
  // each the largest over ranks.
  std::vector<std::vector<double>> ms;
  std::vector<std::array<std::vector<double>, 3>> phase_ms;
  std::vector<double> sm_clock_mhz;  // [round]
};

MoeRounds time_moe_rounds(World& w, MoeLayer& layer,
                          const std::vector<std::pair<MoeLayerVariant, MoeSchedulePlan>>& bodies, int warmup,
                          int rounds);

// One run of a body between fork and join (no timing), for checks and warm-up.
void run_moe_once(World& w, MoeLayer& layer, MoeLayerVariant v, const MoeSchedulePlan& plan);

}  // namespace xstage
