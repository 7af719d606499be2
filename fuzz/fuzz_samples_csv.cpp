// The samples CSV of `xstage fit` / `xstage validate` (a probe CSV), and the
// model's prediction for every row it accepts.
#include "fuzz_target.hpp"
#include "xstage/model/fit.hpp"
#include "xstage/model/profile.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  expect_parsed_or_rejected(data, size, [](const std::string& t) {
    const xstage::SampleSet set = xstage::parse_samples_csv(t, "fuzz.csv");
    const xstage::Profile& p = xstage::default_profile();
    for (const xstage::SamplePoint& s : set.points)
      if (!(xstage::predicted_issue_ns(p, s) >= 0)) std::abort();
  });
  return 0;
}
