// `xstage visible` without a GPU: option checks, the clock-offset estimate,
// the fluid drain, and the per-burst report of synthetic traces.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cli_runner.hpp"
#include "harness/visible/visible.hpp"
#include "xstage/core/error.hpp"
#include "xstage/model/profile.hpp"

using namespace xstage;

namespace {
void expect_error_mentions(const VisiblePoint& p, const std::string& word) {
  try {
    validate(p);
    ADD_FAILURE() << "no error for " << word;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
  }
}

Profile test_profile(double R_Bps, double Q_bytes) {
  Profile p = *find_embedded_profile("h200-host-pcie");
  p.R_Bps = R_Bps;
  p.Q_bytes = Q_bytes;
  p.latency_ns = 0;
  return p;
}
}  // namespace

TEST(Visible, OptionChecksNameTheOption) {
  VisiblePoint ok;
  EXPECT_NO_THROW(validate(ok));
  VisiblePoint p = ok;
  p.K = 0;
  expect_error_mentions(p, "--K");
  p = ok;
  p.warps = 33;
  expect_error_mentions(p, "--warps");
  p = ok;
  p.bursts = 0;
  expect_error_mentions(p, "--bursts");
  p = ok;
  p.bursts = 1000;
  p.K = 4000;
  expect_error_mentions(p, "markers");
  p = ok;
  p.V_bytes = 132 * 15;
  expect_error_mentions(p, "--V");
  p = ok;
  p.gap_ns = -1;
  expect_error_mentions(p, "--G");
  p = ok;
  p.gap_ns = NAN;
  expect_error_mentions(p, "--G");
  p = ok;
  p.dst_bytes = 1000;
  expect_error_mentions(p, "--dst-size");
  p = ok;
  p.timeout_ns = 10;
  expect_error_mentions(p, "--timeout");
  p = ok;
  p.calib_rounds = 0;
  expect_error_mentions(p, "--calib-rounds");
  EXPECT_THROW(parse_visible_path("nvlink"), Error);
  EXPECT_EQ(parse_visible_path("peer"), VisiblePath::peer);
  p = ok;
  p.K = 7;
  p.V_bytes = 1000;
  EXPECT_EQ(visible_chunk_bytes(p), 128u);  // 1000/7 = 142 -> 128
}

TEST(Visible, OffsetFromTheShortestRoundWithinItsBound) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> delay(200, 3000), jitter(0, 1);
  for (double res : {0.0, 32.0, 1000.0}) {
    const double offset = 1.234567e9;
    std::vector<PingRound> rounds;
    double t = 1e6;
    for (int i = 0; i < 500; ++i) {
      const double there = delay(rng), back = delay(rng);
      const double read_at = t + there;                      // CPU time when the GPU reads its clock
      double gpu = read_at + offset;
      if (res > 0) gpu = std::floor(gpu / res) * res;        // the timer reads down to its step
      rounds.push_back({t, t + there + back, gpu});
      t += there + back + 100 * jitter(rng);
    }
    const ClockOffset c = estimate_offset(rounds, res);
    EXPECT_LE(std::abs(c.offset_ns - offset), c.error_ns) << "resolution " << res;
    double best = 1e30;
    for (const auto& r : rounds) best = std::min(best, r.t_recv_ns - r.t_send_ns);
    EXPECT_DOUBLE_EQ(c.rtt_ns, best);
    EXPECT_DOUBLE_EQ(c.error_ns, 0.5 * best + 0.5 * res);
    EXPECT_EQ(c.rounds, 500);
  }
  EXPECT_THROW(estimate_offset({}, 0), Error);
  EXPECT_THROW(estimate_offset({{10, 5, 0}}, 0), Error);
  // A symmetric round trip gives the offset exactly.
  const ClockOffset s = estimate_offset({{100, 300, 1200}}, 0);
  EXPECT_DOUBLE_EQ(s.offset_ns, 1000);
  EXPECT_DOUBLE_EQ(s.error_ns, 100);
}

TEST(Visible, ClockMapInterpolatesTheDrift) {
  ClockMap m;
  m.before = {1000, 50, 100, 0, 10};
  m.after = {1010, 70, 140, 1e6, 10};  // 10 ns over 1 ms: 10 ppm
  EXPECT_DOUBLE_EQ(m.at(0), 1000);
  EXPECT_DOUBLE_EQ(m.at(5e5), 1005);
  EXPECT_DOUBLE_EQ(m.at(1e6), 1010);
  EXPECT_NEAR(m.drift_ppm(), 10, 1e-9);
  EXPECT_DOUBLE_EQ(m.error_ns(), 70);
}

TEST(Visible, FluidStageDrainsAtR) {
  // 1e6 B at once into a 1 GB/s (1 B/ns) stage: gone after 1 ms, half at 0.5 ms.
  const FluidStage impulse({{0, 0, 1e6}}, 1e9);
  EXPECT_NEAR(impulse.time_departed(1e6), 1e6, 1e-3);
  EXPECT_NEAR(impulse.occupancy(5e5), 5e5, 1e-3);
  EXPECT_NEAR(impulse.max_occupancy(), 1e6, 1e-3);
  EXPECT_TRUE(std::isinf(impulse.time_departed(2e6)));
  // Arriving slower than R: nothing queues, bytes leave as they come.
  const FluidStage slow({{100, 1100, 500}}, 1e9);  // 0.5 B/ns
  EXPECT_NEAR(slow.occupancy(600), 0, 1e-9);
  EXPECT_NEAR(slow.time_departed(500), 1100, 1e-6);
  // Faster than R: 4000 B over 1000 ns into 1 B/ns: 3000 B queued at the end, drained 3000 ns later.
  const FluidStage fast({{0, 1000, 4000}}, 1e9);
  EXPECT_NEAR(fast.occupancy(1000), 3000, 1e-6);
  EXPECT_NEAR(fast.max_occupancy(), 3000, 1e-6);
  EXPECT_NEAR(fast.time_departed(4000), 4000, 1e-6);
  // Two bursts with an idle stage between them: the second starts on an empty stage.
  const FluidStage two({{0, 0, 1000}, {5000, 5000, 1000}}, 1e9);
  EXPECT_NEAR(two.time_departed(1000), 1000, 1e-6);
  EXPECT_NEAR(two.occupancy(3000), 0, 1e-9);
  EXPECT_NEAR(two.time_departed(2000), 6000, 1e-6);
}

TEST(Visible, ReportOfASyntheticTrace) {
  // K = 2 producers, 3 bursts of 2 x 1000 B; each chunk is issued over 100 ns
  // starting every 1000 ns and seen 1500 ns after its fence.
  VisibleTrace t;
  t.point.K = 2;
  t.point.bursts = 3;
  t.point.V_bytes = 2000;
  t.point.gap_ns = 900;
  t.chunk_bytes = 1000;
  t.V_bytes = 2000;
  t.markers_seen = 6;
  for (int b = 0; b < 3; ++b)
    for (int k = 0; k < 2; ++k) {
      const double s = 1000.0 * b + 10 * k;
      t.start_ns.push_back(s);
      t.issued_ns.push_back(s + 100);
      t.fenced_ns.push_back(s + 120);
      t.seen_ns.push_back(s + 120 + 1500);
    }
  t.clock.before = {0, 20, 40, 0, 100};
  t.clock.after = t.clock.before;
  t.timer_resolution_ns = 32;
  t.observer_resolution_ns = 20;
  t.poll_interval_ns = 50;
  const Profile prof = test_profile(1e9, 64e6);  // 1 B/ns
  const VisibleReport r = analyse_visible(t, prof);
  ASSERT_EQ(r.bursts.size(), 3u);
  EXPECT_TRUE(r.all_seen());
  EXPECT_DOUBLE_EQ(r.tolerance_ns, 20 + 32 + 20 + 50);
  for (int b = 0; b < 3; ++b) {
    const VisibleBurst& x = r.bursts[b];
    EXPECT_DOUBLE_EQ(x.issue_start_ns, 1000.0 * b);
    EXPECT_DOUBLE_EQ(x.issue_end_ns, 1000.0 * b + 110);
    EXPECT_DOUBLE_EQ(x.first_visible_ns, 1000.0 * b + 1620);
    EXPECT_DOUBLE_EQ(x.visible_ns, 1000.0 * b + 1630);
    EXPECT_DOUBLE_EQ(x.bytes_issued, 2000.0 * (b + 1));
    // Seen by burst b's issue end: the chunks of bursts <= b - 2 (seen 1620 ns after their start).
    EXPECT_DOUBLE_EQ(x.bytes_visible, b >= 2 ? 2000.0 * (b - 1) : 0.0);
    EXPECT_DOUBLE_EQ(x.occupancy_bytes, x.bytes_issued - x.bytes_visible);
    EXPECT_DOUBLE_EQ(x.drain_ns, 2000);
  }
  // The model: 2000 B per 1000 ns into 1 B/ns: the stage grows by 1000 B a burst.
  EXPECT_NEAR(r.bursts[2].model_visible_ns, 6000, 1e-6);  // 6000 B leave at 1 B/ns from t = 0
  EXPECT_GT(r.bursts[2].model_occupancy_bytes, r.bursts[0].model_occupancy_bytes);
  EXPECT_EQ(r.early_markers, 0u);
  EXPECT_GE(r.min_occupancy_bytes, 0);
  EXPECT_DOUBLE_EQ(r.max_occupancy_bytes, 4000);  // first at burst 1's issue end, bursts 0-1 in flight
  EXPECT_EQ(r.max_occupancy_burst, 1);
  EXPECT_DOUBLE_EQ(r.min_occupancy_bytes, 2000);
  EXPECT_NEAR(r.visible_rate_Bps, 2000.0 * 2 / 2000e-9, 1);
  EXPECT_EQ(r.timeline.size(), 6u);
  for (size_t i = 1; i < r.timeline.size(); ++i) EXPECT_GE(r.timeline[i].t_ns, r.timeline[i - 1].t_ns);
  EXPECT_GT(r.sim_max_occupancy_bytes, 0);
  EXPECT_TRUE(std::isfinite(r.bursts[2].sim_visible_ns));

  // A marker seen before its fence (beyond the tolerance) is counted, and the occupancy drops.
  VisibleTrace bad = t;
  bad.seen_ns[0] = bad.fenced_ns[0] - 500;
  const VisibleReport rb = analyse_visible(bad, prof);
  EXPECT_EQ(rb.early_markers, 1u);
  EXPECT_DOUBLE_EQ(rb.min_occupancy_bytes, 1000);  // at burst 0's issue end

  // A marker never seen: not all seen, that burst has no visible time.
  VisibleTrace lost = t;
  lost.seen_ns[5] = NAN;
  lost.markers_seen = 5;
  const VisibleReport rl = analyse_visible(lost, prof);
  EXPECT_FALSE(rl.all_seen());
  EXPECT_TRUE(std::isnan(rl.bursts[2].visible_ns));

  VisibleTrace wrong = t;
  wrong.seen_ns.pop_back();
  EXPECT_THROW(analyse_visible(wrong, prof), Error);
}

TEST(Visible, CommandRejectsBadOptionsBeforeTheGpu) {
  struct Case {
    const char* args;
    const char* says;
  };
  for (const Case& c : {Case{"visible --path nvlink", "--path"}, Case{"visible --V 100 --K 132", "--V"},
                        Case{"visible --bursts 2000", "--bursts"}, Case{"visible --G -1us", "--G"},
                        Case{"visible --timeout 0", "--timeout"}, Case{"visible --profile no-such-profile", "profile"},
                        Case{"visible --bursts -1", "--bursts"}}) {
    const CliRun r = run_cli(c.args);
    EXPECT_EQ(r.rc, 2) << c.args << ": " << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.args << ": " << r.out;
  }
}

TEST(VisibleCli, MarkersIsFencedOrRelaxed) {
  const CliRun r = run_cli("visible --markers loose");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("--markers"), std::string::npos) << r.out;
}
