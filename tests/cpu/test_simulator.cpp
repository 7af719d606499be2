#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "xstage/core/error.hpp"
#include "xstage/model/model.hpp"
#include "xstage/model/simulator.hpp"

#include "test_profiles.hpp"

using namespace xstage;


TEST(Simulator, ReproducesClosedFormOnRandomParameters) {
  std::mt19937_64 rng(20261130);
  auto logu = [&](double lo, double hi) {
    return std::exp(std::uniform_real_distribution<double>(std::log(lo), std::log(hi))(rng));
  };
  int tested = 0, drain = 0, free_ = 0, capacity = 0;
  while (tested < 300) {
    const Profile p = make_profile(std::uniform_real_distribution<double>(0, 2000)(rng), logu(1e9, 50e9),
                           logu(50e9, 800e9), logu(20e9, 500e9), logu(64e3, 16e6));
    const int K = static_cast<int>(logu(1, 132));
    const double V = logu(64e3, 32e6);
    const Prediction at0 = predict(p, K, V, 0);
    const double G = std::uniform_real_distribution<double>(0, 2.0)(rng) *
                     (std::isfinite(at0.onset_gap_ns) ? at0.onset_gap_ns : 2 * at0.gap_cap_ns);
    const Prediction pr = predict(p, K, V, G);
    const long bursts = 200;
    if (std::isfinite(pr.transient_bursts) && pr.transient_bursts > bursts / 4) continue;  // slow to settle
    const SimResult r = simulate(stage_from_profile(p), periodic_programs(K, V, G, bursts));
    const double sim = steady_issue_ns(r, bursts / 2);
    ASSERT_NEAR(sim, pr.t_iss_ns, 0.02 * pr.t_iss_ns)
        << "K=" << K << " V=" << V << " G=" << G << " R=" << p.R_Bps << " Q=" << p.Q_bytes
        << " fixed=" << p.t0.fixed_ns << " regime=" << to_string(pr.regime);
    ++tested;
    if (pr.regime == Regime::free) ++free_;
    else if (G >= pr.gap_cap_ns) ++capacity;
    else ++drain;
  }
  // The random draw must have exercised every regime.
  EXPECT_GT(free_, 20);
  EXPECT_GT(drain, 20);
  EXPECT_GT(capacity, 5);
}

TEST(Simulator, SingleBurstIntoEmptyStage) {
  const Profile p = make_profile(500, 10e9, 100e9, 50e9, 1e6);
  for (double V : {0.5e6, 1e6, 4e6, 20e6}) {
    const SimResult r = simulate(stage_from_profile(p), periodic_programs(16, V, 0, 1));
    EXPECT_NEAR(steady_issue_ns(r, 0), single_burst_ns(p, 16, V), 1e-6 * single_burst_ns(p, 16, V)) << V;
  }
}

TEST(Simulator, EarlyDrainRateThenR) {
  // One producer stores V at once into a stage that holds it all (issue far
  // faster than the drain, Q > V): the stage drains at R/2 until T, then R.
  const double R = 10e9, V = 4e6;
  const Profile p = make_profile(0, 1e15, 1e15, R, 1e9);
  const SimResult plain = simulate(stage_from_profile(p), periodic_programs(1, V, 0, 1));
  EXPECT_NEAR(plain.drained_ns, V / R * 1e9, 1.0);
  for (double T_ns : {1e5, 3e5, 1e6}) {  // V drains at R/2 in 8e5 ns
    StageConfig c = stage_from_profile(p);
    c.R_early_Bps = R / 2;
    c.R_early_until_ns = T_ns;
    const SimResult r = simulate(c, periodic_programs(1, V, 0, 1));
    const double early_bytes = R / 2 * 1e-9 * T_ns;
    const double want = early_bytes >= V ? V / (R / 2) * 1e9 : T_ns + (V - early_bytes) / R * 1e9;
    EXPECT_NEAR(r.drained_ns, want, 1e-6 * want) << T_ns;
    EXPECT_NEAR(r.bytes, V, 1.0);
  }
  // A store issued after the early window drains at R.
  StageConfig c = stage_from_profile(p);
  c.R_early_Bps = R / 2;
  c.R_early_until_ns = 1e3;
  Program late;
  late.steps = {Step::compute(2e3), Step::store(V)};
  const SimResult r = simulate(c, {late});
  EXPECT_NEAR(r.drained_ns, 2e3 + V / R * 1e9, 1.0);
  c.R_early_Bps = -1;
  EXPECT_THROW(simulate(c, {late}), Error);
}

TEST(Simulator, ConservesBytesAndRespectsCapacity) {
  const Profile p = make_profile(300, 5e9, 60e9, 40e9, 2e6);
  StageConfig c = stage_from_profile(p);
  c.record_timeline = true;
  const SimResult r = simulate(c, periodic_programs(12, 3e6, 10000, 30));
  EXPECT_NEAR(r.bytes, 12 * 30 * 3e6 / 12, 1.0);
  EXPECT_EQ(r.bursts.size(), 12u * 30u);
  EXPECT_LE(r.max_occupancy, p.Q_bytes * (1 + 1e-9));
  EXPECT_NEAR(r.max_occupancy, p.Q_bytes, 1e-6 * p.Q_bytes);  // this load fills it
  for (const auto& s : r.timeline) EXPECT_LE(s.bytes, p.Q_bytes * (1 + 1e-9));
  EXPECT_GT(r.stalled_ns, 0);
  // Everything stored must drain at R: the stage empties no sooner than bytes / R.
  EXPECT_GE(r.drained_ns, r.bytes / p.R_Bps * 1e9 * (1 - 1e-9));
}

TEST(Simulator, HeterogeneousSchedule) {
  const Profile p = make_profile(0, 10e9, 100e9, 20e9, 1e6);
  // Producer 0 stores 2 MB at once (overflows: must stall), producer 1 only computes.
  std::vector<Program> progs(2);
  progs[0].steps = {Step::store(2e6), Step::compute(1000)};
  progs[1].steps = {Step::compute(50000)};
  const SimResult r = simulate(stage_from_profile(p), progs);
  ASSERT_EQ(r.bursts.size(), 1u);
  // 1 MB fits while issuing at 10 GB/s against a 20 GB/s drain: it never fills.
  EXPECT_NEAR(r.bursts[0].issue_ns(), 2e6 / 10e9 * 1e9, 1e-3);
  EXPECT_NEAR(r.total_ns, 200000 + 1000, 1e-6);  // producer 0 finishes last
  // With a slower drain and a larger burst it fills and stalls: (4 MB - 1 MB) / 5 GB/s = 600 us.
  Profile slow = p;
  slow.R_Bps = 5e9;
  progs[0].steps[0] = Step::store(4e6);
  const SimResult s = simulate(stage_from_profile(slow), progs);
  EXPECT_NEAR(s.bursts[0].issue_ns(), single_burst_ns(slow, 1, 4e6), 1e-3);
  EXPECT_NEAR(s.bursts[0].issue_ns(), 600000, 1e-3);
  EXPECT_NEAR(s.bursts[0].stall_ns, 600000 - 400000, 1e-3);  // 400 us unthrottled
}

TEST(Simulator, PerProducerCapacitySplitsTheStage) {
  const Profile p = make_profile(0, 10e9, 1000e9, 40e9, 4e6);
  std::vector<Program> progs(4);
  progs[0].steps = {Step::store(3e6)};  // one producer alone: 3 MB against its own 1 MB / 10 GB/s
  StageConfig shared = stage_from_profile(p), split = shared;
  split.per_producer_capacity = true;
  const double t_shared = simulate(shared, progs).bursts[0].issue_ns();
  const double t_split = simulate(split, progs).bursts[0].issue_ns();
  EXPECT_NEAR(t_shared, 3e6 / 10e9 * 1e9, 1e-3);  // the shared stage never fills
  // Split: each producer drains at R/K = 10 GB/s, equal to its issue rate: it never fills either.
  EXPECT_NEAR(t_split, 3e6 / 10e9 * 1e9, 1e-3);
  Profile slow = p;
  slow.R_Bps = 20e9;  // 5 GB/s per producer: the split stage fills, the shared one does not
  StageConfig split_slow = stage_from_profile(slow);
  split_slow.per_producer_capacity = true;
  const double t_split_slow = simulate(split_slow, progs).bursts[0].issue_ns();
  EXPECT_NEAR(t_split_slow, (3e6 - 1e6) / 5e9 * 1e9, 1e-3);
}

TEST(Simulator, ReadsScheduleCsv) {
  const auto progs = parse_schedule_csv(
      "# a schedule\nproducer,kind,amount\n0,store,64KiB\n0,compute,2us\n1,store,1MB\n", "sched.csv");
  ASSERT_EQ(progs.size(), 2u);
  ASSERT_EQ(progs[0].steps.size(), 2u);
  EXPECT_DOUBLE_EQ(progs[0].steps[0].amount, 65536);
  EXPECT_DOUBLE_EQ(progs[0].steps[1].amount, 2000);
  EXPECT_DOUBLE_EQ(progs[1].steps[0].amount, 1e6);
}

TEST(Simulator, RejectsBadSchedules) {
  auto msg = [](const std::string& text) {
    try {
      parse_schedule_csv(text, "s.csv");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg("producer,kind,amount\n0,load,1KiB\n").find("s.csv:2: column 'kind'"), std::string::npos);
  EXPECT_NE(msg("producer,kind,amount\n0,store,-1KiB\n").find("s.csv:2"), std::string::npos);
  EXPECT_NE(msg("producer,kind\n0,store\n").find("lacks column 'amount'"), std::string::npos);
  EXPECT_NE(msg("producer,kind,amount\n1,store,1KiB\n").find("producer 0 is missing"), std::string::npos);
  EXPECT_NE(msg("producer,kind,amount\nx,store,1KiB\n").find("column 'producer'"), std::string::npos);
  EXPECT_NE(msg("producer,kind,amount\n0,store\n").find("2 fields, but the header has 3"), std::string::npos);
  const Profile p = make_profile(0, 10e9, 100e9, 20e9, 1e6);
  std::vector<Program> bad(1);
  bad[0].steps = {Step::store(-5)};
  EXPECT_THROW(simulate(stage_from_profile(p), bad), Error);
}

TEST(Simulator, SmallFillCapacityKeepsTheDrainLaw) {
  // A fill capacity far below R G (the host fit's 11 KiB against R G of
  // hundreds of KB) shapes only the transient: in steady state the drain
  // regime still gives V/R - G, as the model and the probe say.
  std::mt19937_64 rng(20261201);
  auto logu = [&](double lo, double hi) {
    return std::exp(std::uniform_real_distribution<double>(std::log(lo), std::log(hi))(rng));
  };
  int drain = 0;
  for (int tested = 0; tested < 200;) {
    Profile p = make_profile(std::uniform_real_distribution<double>(0, 2000)(rng), logu(1e9, 50e9),
                             logu(50e9, 800e9), logu(20e9, 500e9), logu(1e6, 64e6));
    p.Q_fill_bytes = logu(4e3, p.Q_bytes);
    const int K = static_cast<int>(logu(1, 132));
    const double V = logu(64e3, 32e6);
    const Prediction at0 = predict(p, K, V, 0);
    if (!std::isfinite(at0.onset_gap_ns)) continue;
    const double G = std::uniform_real_distribution<double>(0, 1.0)(rng) * std::min(at0.onset_gap_ns, at0.gap_cap_ns);
    const Prediction pr = predict(p, K, V, G);
    const long bursts = 200;
    if (std::isfinite(pr.transient_bursts) && pr.transient_bursts > bursts / 4) continue;
    const SimResult r = simulate(stage_from_profile(p), periodic_programs(K, V, G, bursts));
    ASSERT_NEAR(steady_issue_ns(r, bursts / 2), pr.t_iss_ns, 0.02 * pr.t_iss_ns)
        << "K=" << K << " V=" << V << " G=" << G << " R=" << p.R_Bps << " Q=" << p.Q_bytes
        << " Q_fill=" << p.Q_fill_bytes << " regime=" << to_string(pr.regime);
    ++tested;
    drain += pr.regime == Regime::drain;
  }
  EXPECT_GT(drain, 40);
}

TEST(Simulator, WindowedMeanFollowsTheTransient) {
  // Near the onset the stage takes many bursts to fill: the mean over a window
  // of a finite run is between T0 and the steady state, as windowed_issue_ns says.
  const Profile p = make_profile(200, 50e9, 6e12, 52e9, 24e6);
  const int K = 132;
  const double V = 1.5 * 1048576;
  const long N = 96, from = 32;
  for (double G : {0.0, 10e3, 20e3, 25e3}) {
    const SimResult r = simulate(stage_from_profile(p), periodic_programs(K, V, G, N));
    std::vector<double> per(N, 0.0);
    for (const auto& b : r.bursts) per[b.index] += b.issue_ns() / K;  // mean over producers
    double sum = 0;
    for (long i = from; i < N; ++i) sum += per[i];
    const double sim = sum / (N - from);
    const double model = windowed_issue_ns(p, K, V, G, from, N);
    EXPECT_NEAR(sim, model, 0.05 * model) << "G=" << G;
  }
}

TEST(Simulator, FillCapacityGovernsTheTransient) {
  // A stage that absorbs 24 MB when drained but only 2 MB under back-to-back bursts.
  Profile p = make_profile(200, 50e9, 6e12, 52e9, 24e6);
  p.Q_fill_bytes = 2e6;
  const int K = 132;
  const double V = 256 * 1024.0;
  const long N = 96;
  // A single burst into an empty stage uses all of Q.
  const SimResult one = simulate(stage_from_profile(p), periodic_programs(K, 8e6, 0, 1));
  EXPECT_NEAR(steady_issue_ns(one, 0), single_burst_ns(p, K, 8e6), 1e-3 * single_burst_ns(p, K, 8e6));
  for (double G : {0.0, 2e3, 4e3}) {
    const SimResult r = simulate(stage_from_profile(p), periodic_programs(K, V, G, N));
    std::vector<double> per(N, 0.0);
    for (const auto& b : r.bursts) per[b.index] += b.issue_ns() / K;
    double sum = 0;
    for (long i = 0; i < N; ++i) sum += per[i];
    const double model = windowed_issue_ns(p, K, V, G, 0, N);
    EXPECT_NEAR(sum / N, model, 0.05 * model) << "G=" << G;
    Profile whole = p;
    whole.Q_fill_bytes = 0;  // the same stage filling to Q
    EXPECT_LT(predict(p, K, V, G).transient_bursts, predict(whole, K, V, G).transient_bursts) << "G=" << G;
  }
}

TEST(Simulator, FedProducersRunWhatAFixedProgramRuns) {
  const Profile p = make_profile(300, 5e9, 60e9, 40e9, 2e6);
  const StageConfig c = stage_from_profile(p);
  const std::vector<Program> fixed = periodic_programs(6, 3e6, 10000, 20);
  const SimResult a = simulate(c, fixed);
  // The same steps handed out one pair at a time, as each producer asks.
  std::vector<int> given(6, 0);
  std::vector<double> asked_at;
  const SimResult b = simulate_fed(c, 6, [&](int k, double t, std::vector<Step>& steps) {
    asked_at.push_back(t);
    if (given[size_t(k)]++ < 20) steps = {Step::store(3e6 / 6), Step::compute(10000)};
  });
  EXPECT_NEAR(b.total_ns, a.total_ns, 1e-9 * a.total_ns);
  EXPECT_NEAR(b.drained_ns, a.drained_ns, 1e-9 * a.drained_ns);
  EXPECT_NEAR(b.stalled_ns, a.stalled_ns, 1e-6 * a.stalled_ns + 1e-6);
  EXPECT_EQ(b.burst_count, a.burst_count);
  EXPECT_EQ(asked_at.size(), 6u * 21u);  // 20 refills and the last ask, that ends each producer
  EXPECT_TRUE(std::is_sorted(asked_at.begin(), asked_at.end()));  // asked in time order
  // Bad fed steps and sizes are refused.
  EXPECT_THROW(simulate_fed(c, 2, [](int, double, std::vector<Step>& s) { s = {Step::compute(-1)}; }), Error);
  EXPECT_THROW(simulate_fed(c, 0, [](int, double, std::vector<Step>&) {}), Error);
  EXPECT_THROW(simulate_fed(c, 1, StepFeed{}), Error);
}

namespace {
// The probe's `run` statistic: each producer's issue time over its bursts
// from index `from` on, the slowest producer's mean.
double slowest_mean_issue_ns(const SimResult& r, long bursts, long from = 0) {
  std::map<int, double> per;
  for (const BurstSpan& b : r.bursts)
    if (b.index >= from) per[b.producer] += b.issue_ns();
  double worst = 0;
  for (const auto& [producer, ns] : per) worst = std::max(worst, ns / double(bursts - from));
  return worst;
}
}  // namespace

TEST(Simulator, StaggeredFirstBurstsAreAbsorbedAsCoincidentOnes) {
  // The host path's profile, 132 producers storing 4 MiB a burst 2 ms apart
  // (the stage drains between bursts). Measured with `xstage probe --stagger`
  // (results/h200/probe/stagger/global-timer-49ba6cd/): 1.66 us a burst in
  // lock step and 1.57-1.66 us with the first bursts spread over 0.1-10 us,
  // against V / R = 81 us. A
  // capacity decided at each producer's burst start gave the staggered ones
  // only Q_fill: 29-38 us.
  const Profile& p = *find_embedded_profile("h200-host-pcie");
  const double V = 4 << 20, G = 2e6;
  const long bursts = 8;
  const double lock = slowest_mean_issue_ns(simulate(stage_from_profile(p), periodic_programs(132, V, G, bursts)), bursts);
  for (double spread : {100.0, 1e3, 1e4}) {
    const double staggered =
        slowest_mean_issue_ns(simulate(stage_from_profile(p), staggered_programs(132, V, G, bursts, spread)), bursts);
    EXPECT_LT(staggered, 1.5 * lock) << spread;
    EXPECT_LT(staggered, 0.2 * V / p.R_Bps * 1e9) << spread;
  }
}

TEST(Simulator, ContinuousInTheStagger) {
  // Producers 1e-6 ns and 0.01 ns apart in all (the second beyond the
  // simulator's event tolerance at these times) give what lock step gives,
  // in every regime: the run's end and the slowest producer's issue time.
  // (Not the stall summed over bursts: how throttled time is attributed to
  // bursts issuing at one instant still differs by a few % from a stagger.)
  const Profile& p = *find_embedded_profile("h200-host-pcie");
  const long bursts = 12;
  for (double G : {0.0, 40e3, 212e3, 2e6}) {
    const SimResult lock = simulate(stage_from_profile(p), periodic_programs(132, 4 << 20, G, bursts));
    for (double spread : {1e-6, 1e-2}) {
      const SimResult near = simulate(stage_from_profile(p), staggered_programs(132, 4 << 20, G, bursts, spread));
      EXPECT_NEAR(near.total_ns, lock.total_ns, 1e-4 * lock.total_ns) << G << " " << spread;
      const double a = slowest_mean_issue_ns(lock, bursts), b = slowest_mean_issue_ns(near, bursts);
      EXPECT_NEAR(b, a, 2e-3 * a) << G << " " << spread;
    }
  }
}

TEST(Simulator, StaggeredProducersKeepTheDrainLaw) {
  // In the drain regime the stage never idles, so however far apart the
  // producers start, each producer's bursts cost V / R - G on average once
  // the run has settled (not each burst: the drain is shared unevenly, as on
  // the GPU). Measured at 4 MiB, 40 us (the probe's slowest producer's mean,
  // results/h200/probe/stagger/global-timer-49ba6cd/): 45.8 us in lock step,
  // 43.7-46.0 us staggered by 0.1-50 us; V / R - G = 41 us.
  const Profile& p = *find_embedded_profile("h200-host-pcie");
  const double V = 4 << 20, G = 40e3;
  const long bursts = 48;
  const double law = V / p.R_Bps * 1e9 - G;
  for (double spread : {0.0, 1e3, 5e4, 2e5}) {
    const SimResult r = simulate(stage_from_profile(p), staggered_programs(132, V, G, bursts, spread));
    EXPECT_NEAR(slowest_mean_issue_ns(r, bursts, bursts / 2), law, 0.1 * law) << spread;
  }
}

TEST(Simulator, StaggeredProgramsRejectNonsense) {
  EXPECT_THROW(staggered_programs(4, 1e6, 0, 4, -1), Error);
  EXPECT_THROW(staggered_programs(4, 1e6, 0, 4, std::nan("")), Error);
  EXPECT_THROW(staggered_programs(1000, 1e6, 0, 1 << 20, 1), Error);
  const std::vector<Program> one = staggered_programs(1, 1e6, 5, 3, 100);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].steps.size(), 7u);  // the (zero) offset, then 3 x (store, compute)
}
