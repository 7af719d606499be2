#pragma once
// The fp64 CPU reference of the whole MoE layer on sampled tokens (internal
// to src/runtime): per (token, slot), L1 and SwiGLU times the routing weight,
// rounded to bf16 as the GPU stores h; L2, rounded to bf16 as the combine
// buffer holds it; the token's k rows summed. Experts are computed one at a
// time per worker thread, each drawing its weights once.
#include <cstdint>
#include <functional>
#include <vector>

#include "harness/moe/moe_layer_bench.hpp"

namespace xstage {

// Any input element on the host, as float (redrawn or from the given arrays).
struct MoeLayerHostInputs {
  int hidden = 0, inter = 0;
  std::function<void(int rank, int token, float* out)> x_row;  // [hidden]
  std::function<void(int expert, float* out)> w13;             // [2 inter, hidden], interleaved
  std::function<void(int expert, float* out)> w2;              // [hidden, inter]
};

struct MoeRefToken {
  int rank = 0, token = 0;
};

// Per token of `tokens`, the layer's output row [hidden]; routes[rank] is that rank's routing.
std::vector<std::vector<double>> moe_layer_reference(const MoeLayerHostInputs& in, const std::vector<MoeRoutes>& routes,
                                                     const std::vector<MoeRefToken>& tokens);

// The GPU's rows (bf16, [tokens][hidden]) against the reference: relative
// error sqrt(sum diff^2 / sum ref^2) and the largest absolute difference
// (a non-finite element counts as infinite).
void moe_compare_rows(const std::vector<std::vector<double>>& ref, const std::vector<std::vector<uint16_t>>& got,
                      double& rel_err, double& max_abs);

}  // namespace xstage
