#pragma once
// GPU tests skip where the machine has fewer GPUs than they need, except
// under XSTAGE_REQUIRE_GPU=N (every device run sets it): a test that needs at
// most N GPUs and finds fewer then fails, so a run on a machine whose GPU is
// missing or hidden cannot pass by skipping.
#include <gtest/gtest.h>

#include <cstdlib>

#include "xstage/core/device.hpp"

namespace xstage::gpu_tests {
inline int required_gpus() {
  const char* v = std::getenv("XSTAGE_REQUIRE_GPU");
  return v == nullptr ? 0 : std::atoi(v);
}
}  // namespace xstage::gpu_tests

#define XSTAGE_NEED_GPUS(n)                                                                                       \
  do {                                                                                                            \
    const int xstage_have_ = ::xstage::cuda_device_count();                                                       \
    if (xstage_have_ < (n)) {                                                                                     \
      if ((n) <= ::xstage::gpu_tests::required_gpus())                                                              \
        FAIL() << "needs " << (n) << " GPU(s), " << xstage_have_ << " visible (XSTAGE_REQUIRE_GPU is set)";      \
      else                                                                                                        \
        GTEST_SKIP() << "needs " << (n) << " GPU(s), " << xstage_have_ << " visible";                            \
    }                                                                                                             \
  } while (0)
