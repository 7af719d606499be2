#pragma once
// What every fuzz target shares: an input either parses or is rejected with
// xstage::Error; any other exception, a crash or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "xstage/core/error.hpp"

template <class F>
void expect_parsed_or_rejected(const uint8_t* data, size_t size, F&& parse) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    parse(text);
  } catch (const xstage::Error&) {
    // rejected with a message: what a bad input should get
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: an exception other than xstage::Error escaped: %s\n", e.what());
    std::abort();
  }
}
