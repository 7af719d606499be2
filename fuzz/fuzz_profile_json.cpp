// A profile JSON (`--profile FILE`), and the model and simulator on every
// profile it accepts.
#include <nlohmann/json.hpp>

#include "fuzz_target.hpp"
#include "xstage/model/model.hpp"
#include "xstage/model/profile.hpp"
#include "xstage/model/simulator.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  expect_parsed_or_rejected(data, size, [](const std::string& t) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(t);
    } catch (const nlohmann::json::exception&) {
      return;  // not JSON: load_profile reports it; nothing of ours ran
    }
    const xstage::Profile p = xstage::profile_from_json(j, "fuzz.json");
    for (double K : {1.0, 132.0})
      for (double V : {4096.0, 4e6})
        for (double G : {0.0, 2e4}) {
          const xstage::Prediction pr = xstage::predict(p, K, V, G);
          if (!(pr.t_iss_ns > 0)) std::abort();  // a profile that passed validation predicts a positive time
        }
    xstage::simulate(xstage::stage_from_profile(p), xstage::periodic_programs(4, 1 << 20, 5000, 20));
  });
  return 0;
}
