// A profile at size, read as `--profile FILE` reads it: through the one
// input reader (blocks, the 64 MiB cap) and the JSON parser, with inputs up
// to megabytes (scripts/fuzz.sh gives this target -max_len=4194304), then
// a prediction and a short simulation as in profile_json.
#include <unistd.h>

#include <fstream>

#include "fuzz_target.hpp"
#include "xstage/model/model.hpp"
#include "xstage/model/profile.hpp"
#include "xstage/model/simulator.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/xstage-fuzz-profile-" + std::to_string(::getpid()) + ".json";
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  expect_parsed_or_rejected(data, 0, [](const std::string&) {
    const xstage::Profile p = xstage::load_profile(path);
    const xstage::Prediction r = xstage::predict(p, 16, 1 << 20, 5000);
    if (!(r.t_iss_ns > 0)) std::abort();
    xstage::StageConfig cfg = xstage::stage_from_profile(p);
    const auto progs = xstage::periodic_programs(4, 1 << 20, 5000, 20);
    (void)xstage::simulate(cfg, progs);
  });
  return 0;
}
