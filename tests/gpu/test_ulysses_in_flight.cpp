// The order of flags and data while the fused kernel still writes: the CPU
// polls every completion flag in mapped host memory, and each flag, once it
// holds the run's epoch, must find its tile's rows there already
// (UlyssesAttention::check_flags_in_flight). check_against_local alone looks
// after everything has landed, where a flag published too early would pass.
#include <gtest/gtest.h>

#include <iostream>
#include <string>

#include "gpu/need_gpus.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/ulysses/ulysses.hpp"

using namespace xstage;

TEST(UlyssesInFlight, EveryFlagFindsItsTileThereWhileTheKernelRuns) {
  XSTAGE_NEED_GPUS(1);
  auto world = World::create({Backend::emulated, 4, Placement::host, 0});
  int early = 0, checked = 0;
  for (int D : {64, 128}) {
    // S = 12001 over 4 ranks: shards of 3001 rows (2998 for the last), not a
    // multiple of the 128-row tile, so tiles straddle shard boundaries; about
    // a millisecond a run, so that the CPU sees flags while tiles still run.
    UlyssesAttention ua(*world, 1, 8, D, 12001);
    ua.set_sequence(12001);
    ua.fill_inputs(uint64_t(900 + D));
    for (UlyssesVariant v : {UlyssesVariant::fused, UlyssesVariant::coupled})
      for (StorePath s : {StorePath::vector16, StorePath::bulk, StorePath::paced,
                              StorePath::paced_bulk, StorePath::paced_warp})
        for (Completion f : {Completion::lagged, Completion::eager, Completion::at_exit}) {
          if (ulysses_combination_error(s, v, f, ua.kernel())) continue;
          if (v == UlyssesVariant::coupled && f != Completion::eager) continue;  // coupled has one timing
          UlyssesRun r{v};
          r.store = s, r.flags = f, r.timeout_s = 20;
          int seen_early = 0;
          EXPECT_EQ(ua.check_flags_in_flight(r, &seen_early), "")
              << to_string(v) << " " << to_string(s) << " " << to_string(f) << " D " << D;
          // In flight, not after the fact: flags published per tile (lagged,
          // eager, coupled) are seen while the kernel runs (80-230 of 776 on
          // the H200); at exit they come in the CTAs' last microseconds (8-52),
          // so those count toward the total only.
          if (f != Completion::at_exit)
            EXPECT_GT(seen_early, 0) << to_string(v) << " " << to_string(s) << " " << to_string(f) << " D " << D;
          early += seen_early;
          ++checked;
          std::cout << to_string(v) << " " << to_string(s) << " " << to_string(f) << " D " << D << ": "
                    << seen_early << " flags first seen while the kernel ran\n";
        }
  }
  EXPECT_EQ(checked, 2 * (3 + 3 + 2 + 1 + 1 + 2));  // fused: 3 vector16, 3 bulk, 2 paced, 2 producer-sent; coupled: 2
  EXPECT_GT(early, 0);
}

TEST(UlyssesInFlight, NeedsHostBuffersAndAVariantWithFlags) {
  XSTAGE_NEED_GPUS(1);
  auto device_world = World::create({Backend::emulated, 2, Placement::device, 0});
  UlyssesAttention on_device(*device_world, 1, 2, 64, 300);
  on_device.set_sequence(300);
  on_device.fill_inputs(1);
  try {
    on_device.check_flags_in_flight(UlyssesRun{UlyssesVariant::fused});
    ADD_FAILURE() << "device buffers: the CPU cannot read them during the run";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("; expected emulated ranks with host buffers"), std::string::npos) << e.what();
  }
  auto host_world = World::create({Backend::emulated, 2, Placement::host, 0});
  UlyssesAttention on_host(*host_world, 1, 2, 64, 300);
  on_host.set_sequence(300);
  on_host.fill_inputs(2);
  EXPECT_THROW(on_host.check_flags_in_flight(UlyssesRun{UlyssesVariant::attention_only}), Error);
  EXPECT_EQ(on_host.check_flags_in_flight(UlyssesRun{UlyssesVariant::fused}), "");  // the default store path
}
