#include <gtest/gtest.h>

#include <cmath>

#include "xstage/model/model.hpp"

#include "test_profiles.hpp"

using namespace xstage;


TEST(Model, T0SaturatesInK) {
  const Profile p = make_profile(1000, 10e9, 100e9, 50e9, 4e6);
  // V = 1e6 bytes: K = 1 -> 1e6 / 10 GB/s = 100 us; K = 20 saturates at 100 GB/s -> 10 us.
  EXPECT_NEAR(t0_iss_ns(p, 1, 1e6), 1000 + 100000, 1e-6);
  EXPECT_NEAR(t0_iss_ns(p, 5, 1e6), 1000 + 20000, 1e-6);
  EXPECT_NEAR(t0_iss_ns(p, 20, 1e6), 1000 + 10000, 1e-6);
}

TEST(Model, RegimesAndOnsetGap) {
  const Profile p = make_profile(1000, 10e9, 100e9, 50e9, 4e6);
  const double K = 20, V = 1e6;  // T0 = 11 us, V/R = 20 us, G* = 9 us, G_cap = 80 - 1 = 79 us
  const Prediction at0 = predict(p, K, V, 0);
  EXPECT_EQ(at0.regime, Regime::drain);
  EXPECT_NEAR(at0.t_iss_ns, 20000, 1e-6);
  EXPECT_NEAR(at0.onset_gap_ns, 9000, 1e-6);
  EXPECT_NEAR(at0.gap_cap_ns, 79000, 1e-6);
  EXPECT_FALSE(at0.exceeds_capacity);
  const Prediction mid = predict(p, K, V, 5000);
  EXPECT_EQ(mid.regime, Regime::drain);
  EXPECT_NEAR(mid.t_iss_ns, 15000, 1e-6);
  EXPECT_NEAR(mid.stall_ns, 4000, 1e-6);
  EXPECT_NEAR(mid.period_ns, 20000, 1e-6);  // drain-dominated period is V/R
  const Prediction past = predict(p, K, V, 9000.001);
  EXPECT_EQ(past.regime, Regime::free);
  EXPECT_NEAR(past.t_iss_ns, 11000, 1e-6);
  EXPECT_EQ(predict(p, K, V, 1e6).regime, Regime::free);
  EXPECT_NEAR(predict(p, K, V, 50000).utilisation, 50000.0 / 61000.0, 1e-12);
}

TEST(Model, CapacityBoundsWhatAGapCanBuy) {
  // V = 10 MB > Q = 4 MB: even an infinite gap leaves (V - Q)/R of drain.
  const Profile p = make_profile(1000, 10e9, 100e9, 50e9, 4e6);
  const double K = 20, V = 10e6;  // T0 = 101 us, V/R = 200 us, G_cap = 79 us
  const Prediction inf_gap = predict(p, K, V, 1e12);
  EXPECT_TRUE(inf_gap.exceeds_capacity);
  EXPECT_TRUE(std::isinf(inf_gap.onset_gap_ns));
  EXPECT_EQ(inf_gap.regime, Regime::drain);
  EXPECT_NEAR(inf_gap.t_iss_ns, 1000 + (10e6 - 4e6) / 50e9 * 1e9, 1e-6);  // fixed + (V - Q)/R
  EXPECT_NEAR(inf_gap.t_iss_ns, single_burst_ns(p, K, V), 1e-6);
  // Below the cap the steady-state law V/R - G holds.
  EXPECT_NEAR(predict(p, K, V, 30000).t_iss_ns, 170000, 1e-6);
  // A single small burst into an empty stage never stalls.
  EXPECT_NEAR(single_burst_ns(p, K, 1e6), t0_iss_ns(p, K, 1e6), 1e-6);
}

TEST(Model, TransientBurstsBeforeSteadyState) {
  const Profile p = make_profile(0, 10e9, 100e9, 50e9, 4e6);
  // K = 20: T0 = 10 us; V = 1 MB, G = 0: growth per burst = 1e6 - 50e9 * 10e-6 = 0.5 MB -> 8 free bursts.
  EXPECT_DOUBLE_EQ(predict(p, 20, 1e6, 0).transient_bursts, 8);
  EXPECT_TRUE(std::isinf(predict(p, 20, 1e6, 1e6).transient_bursts));
}

TEST(Model, Counterfactuals) {
  Profile p = make_profile(1000, 10e9, 100e9, 50e9, 4e6);
  p.latency_ns = 2000;
  const double K = 20, V = 1e6;
  EXPECT_NEAR(unbounded_async_ns(p, K, V, 0), 11000, 1e-6);
  EXPECT_NEAR(completion_coupled_ns(p, K, V, 0), 22000, 1e-6);      // V/R + L
  EXPECT_NEAR(completion_coupled_ns(p, K, V, 1e6), 22000, 1e-6);    // the gap never helps
  EXPECT_NEAR(model_issue_ns(ModelKind::burst_gap, p, K, V, 1e6), 11000, 1e-6);
  // Burst-Gap lies between the two counterfactuals.
  for (double G : {0.0, 3e3, 9e3, 50e3}) {
    const double bg = predict(p, K, V, G).t_iss_ns;
    EXPECT_LE(unbounded_async_ns(p, K, V, G), bg + 1e-9);
    EXPECT_LE(bg, completion_coupled_ns(p, K, V, G) + 1e-9);
  }
}

TEST(Model, RejectsNonsense) {
  const Profile p = make_profile(1000, 10e9, 100e9, 50e9, 4e6);
  EXPECT_THROW(predict(p, 0, 1e6, 0), std::exception);
  EXPECT_THROW(predict(p, 1, 0, 0), std::exception);
  EXPECT_THROW(predict(p, 1, 1e6, -1), std::exception);
}
