// A recorded sweep (`xstage ulysses -o` JSON, single or merged) as
// `xstage ulysses-predict` reads it, and the prediction for small shapes.
#include "fuzz_target.hpp"
#include "xstage/model/profile.hpp"
#include "xstage/ulysses/ulysses_prediction.hpp"
#include "xstage/ulysses/ulysses_report.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  expect_parsed_or_rejected(data, size, [](const std::string& t) {
    const auto series = xstage::parse_ulysses_report(t, "fuzz.json");
    const xstage::Profile& p = xstage::default_profile();
    for (const auto& s : series)
      for (const auto& pt : s.points) {
        if (!(pt.attention_only_us > 0)) continue;
        xstage::UlyssesShape shape = s.shape;
        shape.S = pt.S;
        const auto ks = xstage::ulysses_kernel_shape(shape, s.emulated, 0, s.block_m, s.concurrent_tiles,
                                                     pt.attention_only_us);
        if (ks.tiles > 20000) continue;  // keep each run short
        const auto pr = xstage::predict_ulysses(p, ks);
        if (!(pr.fused_us > 0)) std::abort();
      }
  });
  return 0;
}
