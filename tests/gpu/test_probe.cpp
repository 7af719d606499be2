// The probe kernels on a real GPU: every store kind and gap kind writes exactly
// what it should, spans are sane, and the completion modes report times.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>

#include "cli_runner.hpp"
#include "gpu/need_gpus.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/probe/probe.hpp"

using namespace xstage;

namespace {
}  // namespace

class ProbeKinds : public ::testing::TestWithParam<std::tuple<Transport, StoreKind, GapKind>> {};

TEST_P(ProbeKinds, WritesExactlyWhatItStores) {
  XSTAGE_NEED_GPUS(1);
  const auto [t, s, g] = GetParam();
  Prober prober(t, 0, size_t(64) << 20);
  ProbePoint p;
  p.K = 7;                    // not a divisor of anything
  p.warps = 3;
  p.V_bytes = 7 * 16 * 1237;  // a share per producer that is no multiple of the 16 KiB tile
  p.gap_ns = 2000;
  p.bursts = 9;
  p.store = s;
  p.gap = g;
  const ProbeMeasurement m = prober.run(p);
  EXPECT_EQ(m.mismatches, 0u);
  EXPECT_EQ(m.checked_words, uint64_t(m.V_bytes / 4) * 9);
  ASSERT_EQ(m.issue_max_ns.size(), 9u);
  for (int b = 0; b < 9; ++b) {
    EXPECT_GT(m.issue_max_ns[b], 0);
    EXPECT_LE(m.issue_mean_ns[b], m.issue_max_ns[b] * (1 + 1e-9));
    EXPECT_LT(m.issue_max_ns[b], 1e8);  // under 100 ms: no wrap, no garbage
  }
  EXPECT_GT(m.cycles_per_ns, 0.5);
  EXPECT_LT(m.cycles_per_ns, 3.0);
}

INSTANTIATE_TEST_SUITE_P(AllKinds, ProbeKinds,
                         ::testing::Combine(::testing::Values(Transport::local, Transport::host),
                                            ::testing::Values(StoreKind::v4, StoreKind::b64, StoreKind::b32,
                                                              StoreKind::bulk),
                                            ::testing::Values(GapKind::spin, GapKind::fma, GapKind::mma)),
                         [](const auto& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_" +
                                  to_string(std::get<1>(info.param)) + "_" + to_string(std::get<2>(info.param));
                         });

TEST(Probe, CompletionTimesFollowTheBurst) {
  XSTAGE_NEED_GPUS(1);
  for (BurstCompletion c : {BurstCompletion::fence, BurstCompletion::flag}) {
    Prober prober(Transport::host, 0, size_t(64) << 20);
    ProbePoint p;
    p.K = 16;
    p.V_bytes = 1 << 20;
    p.gap_ns = 50000;
    p.bursts = 6;
    p.completion = c;
    const ProbeMeasurement m = prober.run(p);
    EXPECT_EQ(m.mismatches, 0u);
    const auto& done = c == BurstCompletion::fence ? m.fence_ns : m.complete_ns;
    ASSERT_EQ(done.size(), 6u) << to_string(c);
    for (int b = 0; b < 6; ++b) EXPECT_GE(done[b], m.issue_max_ns[b] * 0.5) << to_string(c) << " burst " << b;
    // 1 MiB over PCIe (~50 GB/s) cannot be visible in under 10 us.
    EXPECT_GT(*std::max_element(done.begin(), done.end()), 10000.0) << to_string(c);
  }
}

TEST(Probe, GapIsHonoured) {
  XSTAGE_NEED_GPUS(1);
  Prober prober(Transport::local, 0, size_t(16) << 20);
  ProbePoint p;
  p.K = 4;
  p.V_bytes = 4 * 4096;
  p.bursts = 20;
  p.gap_ns = 100000;
  const auto t0 = std::chrono::steady_clock::now();
  prober.run(p);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(ms, 20 * 0.1 * 0.9);  // 20 gaps of 100 us at least
}

TEST(Probe, PeerNeedsTwoGpus) {
  XSTAGE_NEED_GPUS(1);
  if (cuda_device_count() >= 2) GTEST_SKIP() << "two GPUs: the multi-GPU tests cover peer";
  try {
    Prober prober(Transport::peer, 0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a second GPU"), std::string::npos) << e.what();
  }
}

TEST(Probe, BadPointsAreRejected) {
  XSTAGE_NEED_GPUS(1);
  Prober prober(Transport::local, 0, size_t(1) << 20);
  ProbePoint p;
  p.K = 64;
  p.V_bytes = 512;  // 8 bytes per producer
  EXPECT_THROW(prober.run(p), Error);
  p.V_bytes = 4 << 20;  // larger than the destination
  EXPECT_THROW(prober.run(p), Error);
}

TEST(Probe, CommandWritesCsvProfileAndValidation) {
  XSTAGE_NEED_GPUS(1);
  const std::string dir = ::testing::TempDir() + "/probe-cmd";
  const CliRun r = run_cli("probe --transport local --K 8,32 --V 1MiB,4MiB --G 0,2us,20us,200us --bursts 16 "
                           "--quiet --bootstrap 2 -o " + dir);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("R = "), std::string::npos) << r.out;
  const CliRun p = run_cli("predict --profile " + dir + "/profile-local.json --K 8 --V 1MiB --G 2us --json");
  EXPECT_EQ(p.rc, 0) << p.out;
}

TEST(Probe, StaggerIsRealisedAndRecorded) {
  XSTAGE_NEED_GPUS(1);
  Prober prober(Transport::local, 0, size_t(16) << 20);
  ProbePoint p;
  p.K = 8;
  p.V_bytes = 8 * 4096;
  p.bursts = 4;
  p.gap_ns = 1000;
  // Every producer waits for the same instant of the global timer (plus its
  // stagger): what is left is the timer's step and the few instructions
  // between the deadline and the first burst's record.
  const double lock = prober.run(p).stagger_realised_ns;
  EXPECT_GE(lock, 0);
  EXPECT_LT(lock, 2e3);
  p.stagger_ns = 300e3;
  const double spread = prober.run(p).stagger_realised_ns;
  EXPECT_GT(spread, p.stagger_ns - 2e3);
  EXPECT_LT(spread, p.stagger_ns + 2e3);
  p.stagger_ns = 2 * kMaxStaggerNs;  // a unit left out: refused before anything runs
  EXPECT_THROW(prober.run(p), Error);
}

TEST(Probe, StaggeredOnlySweepIsRecordedWithoutAFit) {
  XSTAGE_NEED_GPUS(1);
  const std::string dir = ::testing::TempDir() + "/probe-stagger-only";
  const CliRun r =
      run_cli("probe --transport local --K 8 --V 1MiB --G 0,2us,20us --stagger 10us,20us --bursts 8 --quiet -o " + dir);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("0 of them in lock step"), std::string::npos) << r.out;
  std::ifstream csv(dir + "/probe-local.csv");
  std::string text((std::istreambuf_iterator<char>(csv)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(",stagger_ns,stagger_realised_ns\n"), std::string::npos);
  EXPECT_NE(text.find(",stagger,"), std::string::npos);
  EXPECT_EQ(text.find(",train,"), std::string::npos);
}
