#pragma once
// Paired rounds of the MoE layer's variants (internal to src/runtime): every
// round runs every body once, round r starting r bodies further along (so
// that the GPU's clock drifting under a long load reaches every body alike
// and a per-round ratio of two bodies pairs runs of one GPU state).
// A run: a 100 us kernel on the lead stream that reads the SM clock (SM
// cycles over the global timer) and keeps the GPU busy while the host
// enqueues the run, then events around fork / run / join on the lead stream;
// the layer's phase times follow (MoeLayer::phase_ms, which synchronises).
#include <array>
#include <utility>
#include <vector>

#include "xstage/moe/moe_layer.hpp"

namespace xstage {

struct MoeRounds {
  // [body][round]: the run (ms) and its phases dispatch, experts, combine;
  // each the largest over ranks.
  std::vector<std::vector<double>> ms;
  std::vector<std::array<std::vector<double>, 3>> phase_ms;
  std::vector<double> sm_clock_mhz;  // [round]: the median of the readings before its runs
};

MoeRounds time_moe_rounds(World& w, MoeLayer& layer,
                          const std::vector<std::pair<MoeLayerVariant, MoeSchedulePlan>>& bodies, int warmup,
                          int rounds);

// One run of a body between fork and join (no timing), for checks and warm-up.
void run_moe_once(World& w, MoeLayer& layer, MoeLayerVariant v, const MoeSchedulePlan& plan);

}  // namespace xstage
