// The .npy reader (`xstage ulysses --dump` round trips, the SDPA comparison).
#include "fuzz_target.hpp"
#include "util/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  expect_parsed_or_rejected(data, size, [](const std::string& t) {
    const xstage::NpyArray a = xstage::parse_npy(t, "fuzz.npy");
    if (a.data.size() != a.size()) std::abort();
  });
  return 0;
}
