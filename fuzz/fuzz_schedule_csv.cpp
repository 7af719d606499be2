// The schedule CSV of `xstage simulate --schedule`, and the simulator on every
// small schedule it accepts (hostile amounts reach the event loop).
#include "fuzz_target.hpp"
#include "xstage/model/profile.hpp"
#include "xstage/model/simulator.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  expect_parsed_or_rejected(data, size, [](const std::string& t) {
    const auto progs = xstage::parse_schedule_csv(t, "fuzz.csv");
    if (progs.size() > 64 || xstage::total_bursts(progs) > 2000) return;  // keep each run short
    xstage::StageConfig c = xstage::stage_from_profile(xstage::default_profile());
    const xstage::SimResult r = xstage::simulate(c, progs);
    if (!(r.total_ns >= 0) || !(r.bytes >= 0)) std::abort();
  });
  return 0;
}
