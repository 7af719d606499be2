// The two extensions of the Burst-Gap model (docs/model.md): the near queue
// in T0 and the cold start of a run. Limits, monotonicity, that a profile
// without them predicts exactly as before, that the simulator implements the
// same rules, and that the fitter recovers them from synthetic data.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "xstage/core/error.hpp"
#include "xstage/model/fit.hpp"
#include "xstage/model/model.hpp"
#include "xstage/model/simulator.hpp"

#include "test_profiles.hpp"

using namespace xstage;

namespace {

// Like the H200 host path: a near queue of 14 KB per producer at 160 GB/s,
// producers at 48 GB/s, a cold stage of 1.7 MB that regains a third of what is stored.
Profile extended(double Q_fill = 0) {
  Profile p = make_profile(240, 48e9, 20e12, 50e9, 60e6);
  p.t0.near_bytes = 14e3;
  p.t0.near_per_producer_Bps = 160e9;
  p.Q_cold_bytes = 1.7e6;
  p.Q_warm_per_byte = 0.33;
  p.Q_fill_bytes = Q_fill;
  return p;
}

// The one-rate T0 as written before the near queue.
double old_t0(const Profile& p, double K, double V) {
  return p.t0.fixed_ns + V / std::min(K * p.t0.per_producer_Bps, p.t0.aggregate_Bps) * 1e9;
}

// The windowed mean as computed before the cold start.
double old_windowed(const Profile& p, double K, double V, double G, long first, long last) {
  const Prediction r = predict(p, K, V, G);
  if (!std::isfinite(r.transient_bursts)) return r.t_iss_ns;
  const double n_free = std::clamp(r.transient_bursts - first, 0.0, double(last - first));
  return (n_free * r.t0_ns + (double(last - first) - n_free) * r.t_iss_ns) / double(last - first);
}

// Mean over producers of each burst index's issue span.
std::vector<double> per_burst_mean(const SimResult& r, int K, long N) {
  std::vector<double> per(N, 0.0);
  for (const auto& b : r.bursts) per[b.index] += b.issue_ns() / K;
  return per;
}

}  // namespace

TEST(NearQueue, WithoutItT0IsTheOneRateForm) {
  const Profile p = make_profile(133, 51.7e9, 2.045e12, 50.5e9, 49e6);
  for (double K : {1.0, 16.0, 33.0, 132.0})
    for (double V : {4096.0, 256e3, 1.5e6, 64e6}) EXPECT_EQ(t0_iss_ns(p, K, V), old_t0(p, K, V)) << K << " " << V;
  // A near queue as fast as the producer changes nothing either.
  Profile same = p;
  same.t0.near_bytes = 16e3;
  same.t0.near_per_producer_Bps = p.t0.per_producer_Bps;
  for (double V : {4096.0, 256e3, 64e6}) EXPECT_NEAR(t0_iss_ns(same, 16, V), old_t0(p, 16, V), 1e-9 * old_t0(p, 16, V));
}

TEST(NearQueue, TwoRateFillLimits) {
  const Profile p = extended();
  const double K = 16, b = p.t0.near_bytes, rn = p.t0.near_per_producer_Bps, rp = p.t0.per_producer_Bps;
  // Inside the near queues: only the fast rate.
  EXPECT_NEAR(t0_iss_ns(p, K, 0.5 * K * b), 240 + 0.5 * K * b / (K * rn) * 1e9, 1e-9);
  EXPECT_NEAR(t0_iss_ns(p, K, K * b), 240 + b / rn * 1e9, 1e-9);
  // Far past them: the producer's rate, offset by what the near queues saved.
  const double V = 64e6;
  EXPECT_NEAR(t0_iss_ns(p, K, V), old_t0(p, K, V) - K * b * (1 / (K * rp) - 1 / (K * rn)) * 1e9, 1e-6);
  // Continuous at V = K b, increasing in V, and no faster than a producer's near rate.
  EXPECT_NEAR(t0_iss_ns(p, K, K * b * (1 + 1e-12)), t0_iss_ns(p, K, K * b), 1e-6);
  double last = 0;
  for (double v = 1e3; v < 1e8; v *= 1.3) {
    const double t = t0_iss_ns(p, K, v);
    EXPECT_GT(t, last) << v;
    EXPECT_GE(t, 240 + v / std::min(K * rn, p.t0.aggregate_Bps) * 1e9 - 1e-9);
    last = t;
  }
  // More producers never issue slower; the aggregate rate caps both phases.
  for (double v : {64e3, 1e6, 16e6}) {
    double prev = kInf;
    for (double k : {1.0, 4.0, 16.0, 66.0, 132.0, 1000.0}) {
      const double t = t0_iss_ns(p, k, v);
      EXPECT_LE(t, prev + 1e-9) << k << " " << v;
      prev = t;
    }
    EXPECT_NEAR(t0_iss_ns(p, 1e6, v), 240 + v / p.t0.aggregate_Bps * 1e9, 1e-9);
  }
}

TEST(ColdStart, BurstsRegainTheCapacity) {
  const Profile p = extended();
  const double K = 132, V = 16e6;
  // Burst 0 into a cold stage overflows Q_cold; later bursts regain capacity and
  // are never slower; once Q_cold + n V warm >= Q the stage is warm (single_burst_ns).
  EXPECT_NEAR(cold_burst_ns(p, K, V, 0), std::max(t0_iss_ns(p, K, V), 240 + (V - 1.7e6) / 50e9 * 1e9), 1e-6);
  double prev = kInf;
  for (int n = 0; n < 40; ++n) {
    const double t = cold_burst_ns(p, K, V, n);
    EXPECT_LE(t, prev + 1e-9);
    EXPECT_GE(t, single_burst_ns(p, K, V) - 1e-9);
    prev = t;
  }
  EXPECT_NEAR(cold_burst_ns(p, K, V, 12), single_burst_ns(p, K, V), 1e-9);  // 1.7 + 12 x 16 x 0.33 MB > 60 MB
  // Without a cold start every burst is warm.
  Profile warm = p;
  warm.Q_cold_bytes = 0;
  EXPECT_EQ(cold_burst_ns(warm, K, V, 0), single_burst_ns(warm, K, V));
  // A burst smaller than the cold capacity never notices it.
  EXPECT_EQ(cold_burst_ns(p, K, 1e6, 0), t0_iss_ns(p, K, 1e6));
}

TEST(ColdStart, WindowedMeanIsTheSumOfColdBursts) {
  const Profile p = extended();
  const double K = 33, V = 24e6;
  for (double G : {2e6, 1e9}) {  // free regime; past G_cap
    const Prediction r = predict(p, K, V, G);
    ASSERT_TRUE(r.regime == Regime::free || G >= r.gap_cap_ns);
    for (auto [a, b] : std::vector<std::pair<long, long>>{{0, 96}, {0, 1}, {0, 3}, {2, 7}, {32, 96}, {5, 1000000}}) {
      double sum = 0;
      for (long n = a; n < std::min(b, 2000L); ++n) sum += cold_burst_ns(p, K, V, double(n));
      if (b > 2000) sum += double(b - 2000) * cold_burst_ns(p, K, V, 2000);
      EXPECT_NEAR(windowed_issue_ns(p, K, V, G, a, b), sum / double(b - a), 1e-9 * sum / double(b - a))
          << "G=" << G << " [" << a << ", " << b << ")";
    }
    // A window long after the cold start is the steady state.
    EXPECT_NEAR(windowed_issue_ns(p, K, V, G, 1000, 1096), r.t_iss_ns, 1e-9 * r.t_iss_ns);
  }
  // Regaining nothing: every burst of the window stalls on the cold capacity.
  Profile stuck = p;
  stuck.Q_warm_per_byte = 0;
  EXPECT_NEAR(windowed_issue_ns(stuck, K, V, 2e6, 10, 20), cold_burst_ns(stuck, K, V, 0), 1e-6);
}

TEST(ColdStart, ProfilesWithoutTheExtensionsPredictAsBefore) {
  // Profiles without the extensions: the embedded nominal ones (the measured
  // H200 ones carry both), and one as the fitter writes it without them.
  std::vector<Profile> old;
  for (const Profile& p : embedded_profiles())
    if (!p.t0.has_near() && !p.has_cold_start()) old.push_back(p);
  ASSERT_GE(old.size(), 2u) << "the nominal profiles should have neither extension";
  Profile fitted = make_profile(133.2, 51.67e9, 2.045e12, 50.48e9, 51.7e6);
  fitted.Q_fill_bytes = 0.995e6;
  old.push_back(fitted);
  for (const Profile& p : old) {
    ASSERT_FALSE(p.t0.has_near()) << p.name;
    ASSERT_FALSE(p.has_cold_start()) << p.name;
    for (double K : {16.0, 132.0})
      for (double V : {256e3, 4e6, 64e6}) {
        EXPECT_EQ(t0_iss_ns(p, K, V), old_t0(p, K, V)) << p.name;
        for (double G : {0.0, 5e3, 100e3, 2e6}) {
          EXPECT_EQ(windowed_issue_ns(p, K, V, G, 0, 96), old_windowed(p, K, V, G, 0, 96)) << p.name;
          EXPECT_EQ(windowed_issue_ns(p, K, V, G, 32, 96), old_windowed(p, K, V, G, 32, 96)) << p.name;
        }
      }
  }
}

TEST(ColdStart, JsonWithoutTheNewFieldsLoadsAsBefore) {
  const std::string path = ::testing::TempDir() + "/old_profile.json";
  std::ofstream(path) << R"({"name": "old", "t0": {"fixed_ns": 133, "per_producer_Bps": 5.2e10,
                             "aggregate_Bps": 2e12}, "R_Bps": 5e10, "Q_bytes": 5e7, "Q_fill_bytes": 1e6})";
  const Profile p = load_profile(path);
  EXPECT_EQ(p.t0.near_bytes, 0);
  EXPECT_EQ(p.Q_cold_bytes, 0);
  EXPECT_EQ(p.empty_capacity(0), p.Q_bytes);
  EXPECT_EQ(t0_iss_ns(p, 132, 16e6), old_t0(p, 132, 16e6));
  // Written back, the extensions' keys are there, null (the same keys for every
  // profile), and it reads back as the same profile.
  const nlohmann::json j = to_json(p);
  EXPECT_TRUE(j["t0"]["near_bytes"].is_null());
  EXPECT_TRUE(j["Q_cold_bytes"].is_null());
  EXPECT_EQ(to_json(profile_from_json(j, "again")), j);
  EXPECT_EQ(j["t0"]["form"], "fixed_ns + V / min(K * per_producer_Bps, aggregate_Bps)");
  // An extended profile round-trips.
  Profile e = extended(2e5);
  e.sigma = Uncertainty{};
  e.sigma->near_bytes = 100;
  e.sigma->Q_warm_per_byte = 0.01;
  save_profile(e, path);
  const Profile q = load_profile(path);
  EXPECT_DOUBLE_EQ(q.t0.near_bytes, 14e3);
  EXPECT_DOUBLE_EQ(q.t0.near_per_producer_Bps, 160e9);
  EXPECT_DOUBLE_EQ(q.Q_cold_bytes, 1.7e6);
  EXPECT_DOUBLE_EQ(q.Q_warm_per_byte, 0.33);
  ASSERT_TRUE(q.sigma.has_value());
  EXPECT_DOUBLE_EQ(q.sigma->near_bytes, 100);
  EXPECT_DOUBLE_EQ(q.sigma->Q_warm_per_byte, 0.01);
  EXPECT_EQ(t0_iss_ns(q, 16, 3e6), t0_iss_ns(e, 16, 3e6));
  // Nonsense is rejected with the field's name.
  auto error = [&](const std::string& text) {
    std::ofstream(path) << text;
    try {
      load_profile(path);
    } catch (const Error& err) {
      return std::string(err.what());
    }
    return std::string("no error");
  };
  const std::string core = R"("R_Bps": 5e10, "Q_bytes": 5e7)";
  EXPECT_NE(error(R"({"t0": {"fixed_ns": 1, "per_producer_Bps": 1, "aggregate_Bps": 1, "near_bytes": 100}, )" + core +
                  "}")
                .find("near_per_producer_Bps"),
            std::string::npos);
  EXPECT_NE(error(R"({"t0": {"fixed_ns": 1, "per_producer_Bps": 1, "aggregate_Bps": 1}, "Q_cold_bytes": 6e7, )" + core +
                  "}")
                .find("; expected a value in [0, Q_bytes"),
            std::string::npos);
  EXPECT_NE(error(R"({"t0": {"fixed_ns": 1, "per_producer_Bps": 1, "aggregate_Bps": 1}, "Q_warm_per_byte": -1, )" +
                  core + "}")
                .find("Q_warm_per_byte is -1; expected a finite number >= 0"),
            std::string::npos);
  std::remove(path.c_str());
}

TEST(SimulatorExtensions, SingleBurstsMatchTheClosedForm) {
  const Profile p = extended();
  for (int K : {1, 16, 132})
    for (double V : {8e3, 200e3, 1.5e6, 6e6, 24e6, 100e6}) {
      // Burst 0 of a cold stage.
      const SimResult r = simulate(stage_from_profile(p), periodic_programs(K, V, 0, 1));
      const double model = cold_burst_ns(p, K, V, 0);
      EXPECT_NEAR(steady_issue_ns(r, 0), model, 1e-6 * model) << "K=" << K << " V=" << V;
      // A warm stage: T0 with the near queue, or the capacity floor.
      Profile warm = p;
      warm.Q_cold_bytes = 0;
      const SimResult w = simulate(stage_from_profile(warm), periodic_programs(K, V, 0, 1));
      EXPECT_NEAR(steady_issue_ns(w, 0), single_burst_ns(warm, K, V), 1e-6 * single_burst_ns(warm, K, V));
    }
}

TEST(SimulatorExtensions, ColdStartBurstByBurst) {
  // Every burst starts on an empty stage (gaps longer than V/R): burst n takes cold_burst_ns(n).
  const Profile p = extended();
  for (auto [K, V] : std::vector<std::pair<int, double>>{{132, 16e6}, {33, 24e6}, {16, 64e6}, {132, 4e6}}) {
    const double G = 1.2 * V / p.R_Bps * 1e9;
    const long N = 24;
    const SimResult r = simulate(stage_from_profile(p), periodic_programs(K, V, G, N));
    const auto per = per_burst_mean(r, K, N);
    double sum = 0;
    for (long n = 0; n < N; ++n) {
      EXPECT_NEAR(per[n], cold_burst_ns(p, K, V, double(n)), 1e-4 * per[n]) << "K=" << K << " V=" << V << " n=" << n;
      sum += per[n];
    }
    EXPECT_NEAR(sum / N, windowed_issue_ns(p, K, V, G, 0, N), 1e-4 * sum / N);
  }
}

TEST(SimulatorExtensions, ReproducesClosedFormWithNearQueueAndColdStart) {
  std::mt19937_64 rng(20261201);
  auto logu = [&](double lo, double hi) {
    return std::exp(std::uniform_real_distribution<double>(std::log(lo), std::log(hi))(rng));
  };
  int tested = 0, drain = 0, free_ = 0;
  while (tested < 200) {
    Profile p = make_profile(std::uniform_real_distribution<double>(0, 2000)(rng), logu(1e9, 50e9), logu(50e9, 800e9),
                             logu(20e9, 500e9), logu(64e3, 16e6));
    p.t0.near_bytes = logu(1e3, 64e3);
    p.t0.near_per_producer_Bps = p.t0.per_producer_Bps * logu(1, 10);
    p.Q_cold_bytes = p.Q_bytes * logu(0.01, 1);
    p.Q_warm_per_byte = logu(0.5, 5);  // warm within a few bursts: the steady state is warm
    const int K = static_cast<int>(logu(1, 132));
    const double V = logu(64e3, 32e6);
    const Prediction at0 = predict(p, K, V, 0);
    const double G = std::uniform_real_distribution<double>(0, 2.0)(rng) *
                     (std::isfinite(at0.onset_gap_ns) ? at0.onset_gap_ns : 2 * at0.gap_cap_ns);
    const Prediction pr = predict(p, K, V, G);
    const long bursts = 200;
    if (std::isfinite(pr.transient_bursts) && pr.transient_bursts > bursts / 4) continue;  // slow to settle
    const SimResult r = simulate(stage_from_profile(p), periodic_programs(K, V, G, bursts));
    ASSERT_NEAR(steady_issue_ns(r, bursts / 2), pr.t_iss_ns, 0.02 * pr.t_iss_ns)
        << "K=" << K << " V=" << V << " G=" << G << " regime=" << to_string(pr.regime);
    ++tested;
    (pr.regime == Regime::free ? free_ : drain)++;
  }
  EXPECT_GT(free_, 20);
  EXPECT_GT(drain, 20);
}

TEST(SimulatorExtensions, DrainRegimeRunFromAColdStage) {
  // Short gaps (the stage does not empty after burst 0): burst 0 overflows the
  // cold capacity; the next bursts fill the stage to Q_fill, then the law holds.
  for (double fill : {0.0, 4e6}) {
  const Profile p = extended(fill);
  for (auto [K, V, G] : std::vector<std::tuple<int, double, double>>{{132, 4e6, 0}, {33, 6e6, 20e3}, {16, 16e6, 20e3}}) {
    const long N = 96;
    const SimResult r = simulate(stage_from_profile(p), periodic_programs(K, V, G, N));
    const auto per = per_burst_mean(r, K, N);
    double sum = 0;
    for (double x : per) sum += x;
    const double model = windowed_issue_ns(p, K, V, G, 0, N);
    EXPECT_NEAR(sum / N, model, 0.02 * model) << "K=" << K << " V=" << V << " G=" << G << " Q_fill=" << fill;
    EXPECT_NEAR(per[0], cold_burst_ns(p, K, V, 0), 1e-4 * per[0]);
  }
  }
}

TEST(FitExtensions, RecoversNearQueueAndColdStartFromSyntheticRuns) {
  Profile t = extended();
  t.Q_fill_bytes = 0;  // = Q
  std::mt19937_64 rng(11);
  std::normal_distribution<double> noise(0.0, 0.02);
  std::vector<Sample> s;
  for (double K : {16.0, 66.0, 132.0})
    for (double V : {256e3, 1e6, 4e6, 16e6, 48e6})
      for (double G : {0.0, 20e3, 200e3, 1e6, 2e6}) {
        Sample m;
        m.K = K;
        m.V_bytes = V;
        m.gap_ns = G;
        m.bursts = 96;
        m.steady_from = 0;
        m.issue_ns = windowed_issue_ns(t, K, V, G, 0, 96) * std::exp(noise(rng));
        s.push_back(m);
      }
  FitOptions opt;
  opt.bootstrap = 0;
  const FitResult r = fit_profile(s, opt);
  const Profile& p = r.profile;
  EXPECT_TRUE(r.near_queue);
  EXPECT_TRUE(r.cold_start);
  EXPECT_NEAR(p.R_Bps, t.R_Bps, 0.03 * t.R_Bps);
  // No burst overflowed a warm stage (V <= 48 MB < Q): Q is a lower bound, and it admits every burst seen free.
  EXPECT_FALSE(r.Q_identified);
  EXPECT_LE(p.Q_bytes, t.Q_bytes);
  EXPECT_GT(p.Q_bytes, 45e6);
  EXPECT_NEAR(p.t0.fixed_ns, t.t0.fixed_ns, 0.1 * t.t0.fixed_ns);
  EXPECT_NEAR(p.t0.per_producer_Bps, t.t0.per_producer_Bps, 0.05 * t.t0.per_producer_Bps);
  EXPECT_NEAR(p.t0.near_bytes, t.t0.near_bytes, 0.2 * t.t0.near_bytes);
  EXPECT_NEAR(p.t0.near_per_producer_Bps, t.t0.near_per_producer_Bps, 0.2 * t.t0.near_per_producer_Bps);
  EXPECT_NEAR(p.Q_cold_bytes, t.Q_cold_bytes, 0.15 * t.Q_cold_bytes);
  EXPECT_NEAR(p.Q_warm_per_byte, t.Q_warm_per_byte, 0.15 * t.Q_warm_per_byte);
  for (double K : {16.0, 132.0})
    for (double V : {256e3, 4e6, 48e6}) {
      EXPECT_NEAR(t0_iss_ns(p, K, V), t0_iss_ns(t, K, V), 0.05 * t0_iss_ns(t, K, V)) << K << " " << V;
      for (double G : {0.0, 2e6})
        EXPECT_NEAR(windowed_issue_ns(p, K, V, G, 0, 96), windowed_issue_ns(t, K, V, G, 0, 96),
                    0.05 * windowed_issue_ns(t, K, V, G, 0, 96));
    }
  EXPECT_LT(r.median_abs_rel_err, 0.03);
}

TEST(FitExtensions, OneRateDataKeepTheOneRateForm) {
  // Synthetic data of a profile without the extensions: BIC keeps neither.
  const Profile t = make_profile(1200, 8e9, 150e9, 52e9, 3e6);
  std::mt19937_64 rng(5);
  std::normal_distribution<double> noise(0.0, 0.03);
  std::vector<Sample> s;
  for (double K : {4.0, 16.0, 66.0, 132.0})
    for (double V : {256e3, 1e6, 4e6, 8e6})
      for (double G : {0.0, 20e3, 100e3, 500e3}) {
        Sample m;
        m.K = K;
        m.V_bytes = V;
        m.gap_ns = G;
        m.bursts = 96;
        m.steady_from = 32;
        m.issue_ns = windowed_issue_ns(t, K, V, G, 32, 96) * std::exp(noise(rng));
        s.push_back(m);
      }
  FitOptions opt;
  opt.bootstrap = 0;
  const FitResult r = fit_profile(s, opt);
  EXPECT_FALSE(r.near_queue);
  EXPECT_FALSE(r.cold_start);
  EXPECT_FALSE(r.profile.t0.has_near());
  EXPECT_FALSE(r.profile.has_cold_start());
  EXPECT_NEAR(r.profile.R_Bps, t.R_Bps, 0.05 * t.R_Bps);
  // Without extensions the fitter fits the one-rate form only.
  opt.extensions = false;
  const FitResult plain = fit_profile(s, opt);
  EXPECT_FALSE(plain.profile.t0.has_near());
  EXPECT_FALSE(plain.profile.has_cold_start());
}
