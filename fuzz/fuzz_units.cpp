// Sizes and times as typed on the command line and in schedule cells.
#include "fuzz_target.hpp"
#include "xstage/core/units.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  expect_parsed_or_rejected(data, size, [](const std::string& t) {
    const double b = xstage::parse_size_bytes(t, "fuzz", true);
    if (!(b >= 0)) std::abort();  // accepted values are finite and >= 0
    xstage::format_bytes(b);
  });
  expect_parsed_or_rejected(data, size, [](const std::string& t) {
    const double ns = xstage::parse_time_ns(t, "fuzz", false);
    if (!(ns > 0)) std::abort();
    xstage::format_ns(ns);
  });
  return 0;
}
