// `xstage visible` on real GPUs: every marker arrives, after its data, never
// before its burst was issued (within the clock calibration's error), and the
// stage's occupancy stays non-negative.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "gpu/need_gpus.hpp"
#include "harness/visible/visible.hpp"
#include "xstage/model/profile.hpp"

using namespace xstage;

namespace {

VisiblePoint small_point(VisiblePath path, int K, double V, double gap_ns, int bursts) {
  VisiblePoint p;
  p.path = path;
  p.K = K;
  p.warps = 4;
  p.V_bytes = V;
  p.gap_ns = gap_ns;
  p.bursts = bursts;
  p.calib_rounds = 300;
  p.timeout_ns = 10e9;
  p.dst_bytes = 32.0 * (1 << 20);
  return p;
}

// The checks every path must pass; returns the report for path-specific ones.
VisibleReport check_trace(const VisiblePoint& p) {
  VisibleRunner runner(p);
  const VisibleTrace t = runner.run(p);
  const VisibleReport r = analyse_visible(t, *find_embedded_profile(default_profile_name(p.path)));
  const std::string where = std::string(to_string(p.path)) + " K=" + std::to_string(p.K);
  EXPECT_TRUE(r.all_seen()) << where << ": " << t.markers_seen << " markers seen";
  EXPECT_EQ(t.data_mismatches, 0u) << where;
  EXPECT_EQ(t.destination_mismatches, 0u) << where;
  EXPECT_GT(t.checked_words, 0u) << where;
  EXPECT_GT(t.timer_resolution_ns, 0) << where;
  EXPECT_LE(t.timer_resolution_ns, 4096) << where;  // 32 ns or 1 us steps on current parts
  EXPECT_LT(t.clock.error_ns(), 50e3) << where << ": the calibration's error bound";
  EXPECT_EQ(r.early_markers, 0u) << where << " (tolerance " << r.tolerance_ns << " ns)";
  EXPECT_GE(r.min_occupancy_bytes, 0) << where;
  for (const VisibleBurst& b : r.bursts) {
    EXPECT_LE(b.issue_start_ns, b.issue_end_ns) << where << " burst " << b.burst;
    EXPECT_LE(b.issue_end_ns, b.fence_end_ns) << where << " burst " << b.burst;
    EXPECT_TRUE(std::isfinite(b.visible_ns)) << where << " burst " << b.burst;
    EXPECT_GE(b.visible_ns, b.issue_start_ns - r.tolerance_ns) << where << " burst " << b.burst;
    EXPECT_GE(b.visible_ns, b.fence_end_ns - r.tolerance_ns) << where << " burst " << b.burst;
    EXPECT_LE(b.visible_ns - b.issue_start_ns, 1e9) << where << " burst " << b.burst << ": no wrap, no garbage";
    if (b.burst > 0) EXPECT_GE(b.bytes_issued, r.bursts[b.burst - 1].bytes_issued) << where;
  }
  return r;
}

}  // namespace

TEST(VisibleGpu, HostPathMarkersArriveAfterTheirData) {
  XSTAGE_NEED_GPUS(1);
  const VisibleReport r = check_trace(small_point(VisiblePath::host, 16, 1 << 20, 2000, 12));
  // 12 MiB cannot cross PCIe (H200: ~55 GB/s) faster than 200 GB/s.
  const double span = r.bursts.back().visible_ns - r.bursts.front().issue_start_ns;
  EXPECT_GT(span, 12.0 * (1 << 20) / 200e9 * 1e9);
}

TEST(VisibleGpu, HostPathOddSizes) {
  XSTAGE_NEED_GPUS(1);
  // 7 producers, shares that are no power of two, more bursts than slots fit (the slots rotate).
  VisiblePoint p = small_point(VisiblePath::host, 7, 7 * 16 * 1237, 0, 40);
  p.dst_bytes = 7 * 16 * 1237 * 9;
  check_trace(p);
}

TEST(VisibleGpu, LocalPathSecondKernelPolls) {
  XSTAGE_NEED_GPUS(1);
  check_trace(small_point(VisiblePath::local, 33, 4 << 20, 0, 16));
}

TEST(VisibleGpu, PeerPathReceiverPolls) {
  XSTAGE_NEED_GPUS(2);
  check_trace(small_point(VisiblePath::peer, 33, 4 << 20, 1000, 16));
}

// The local path in a process of its own, as the command runs it. In a fresh
// CUDA context the producers' first launch (printf-capable) waited for the
// poller, already spinning beside them, to time out; LocalPathSecondKernelPolls
// passed only after the host-path tests had set up the printf buffer in the
// same process (docs/RESULTS.md section 10).
TEST(VisibleGpu, CommandLocalPathInAFreshProcess) {
  XSTAGE_NEED_GPUS(1);
  const CliRun r = run_cli("visible --path local --K 132 --V 1MiB --G 0 --bursts 6 --timeout 20s --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto start = r.out.find('{');
  ASSERT_NE(start, std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(start));
  EXPECT_EQ(j["points"][0]["summary"]["markers_seen"].get<uint64_t>(), 132u * 6u);
}

TEST(VisibleGpu, CommandWritesJson) {
  XSTAGE_NEED_GPUS(1);
  const CliRun r = run_cli("visible --path host --K 16 --V 1MiB --G 0 --bursts 6 --calib-rounds 100 "
                           "--dst-size 16MiB --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto start = r.out.find('{');
  ASSERT_NE(start, std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(start));
  ASSERT_EQ(j["points"].size(), 1u);
  const auto& p = j["points"][0];
  EXPECT_EQ(p["bursts"].size(), 6u);
  EXPECT_EQ(p["summary"]["markers_seen"].get<uint64_t>(), 16u * 6u);
  for (const char* k : {"timer_resolution_ns", "error_ns", "drift_ppm", "before", "after"})
    EXPECT_TRUE(p["clock"].contains(k)) << k;
}
