// A recorded MoE sweep (`xstage moe -o` JSON) as `xstage moe-predict SWEEP`
// reads it, and the prediction of every small configuration in it, so that
// hostile sizes and times reach the model's arithmetic.
#include <cmath>

#include "fuzz_target.hpp"
#include "xstage/model/profile.hpp"
#include "xstage/moe/moe_prediction.hpp"
#include "xstage/moe/moe_sweep_record.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  expect_parsed_or_rejected(data, size, [](const std::string& t) {
    const xstage::RecordedMoeSweep sweep = xstage::parse_moe_sweep(t, "fuzz.json");
    for (const xstage::RecordedMoeConfig& rc : sweep.configs) {
      const xstage::MoeConfig& c = rc.config;
      // Keep each run short: the CLI bounds a prediction at 2^20 tiles (~10 s).
      if (double(c.tokens) * c.P * c.shape.topk > 65536 || double(c.shape.hidden) + c.shape.inter > 65536) continue;
      const xstage::Profile& p = *xstage::find_embedded_profile(xstage::moe_default_profile(c));
      std::string source;
      const auto experts_ms = xstage::moe_compute_only_experts_ms(rc, &source);
      const auto pred = xstage::predict_moe_config(
          c, p, experts_ms && *experts_ms > 0 && std::isfinite(*experts_ms) ? std::optional<double>(*experts_ms * 1e6)
                                                                           : std::nullopt);
      for (const auto& [s, l] : pred.schedulers)
        if (!(l.total_ns() >= 0) || !std::isfinite(l.total_ns())) std::abort();
      if (!(pred.bytes_dispatch >= 0) || !(pred.bytes_combine >= 0)) std::abort();
    }
  });
  return 0;
}
