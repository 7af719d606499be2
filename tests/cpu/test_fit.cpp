#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>

#include "fit/stats.hpp"
#include "xstage/core/error.hpp"
#include "xstage/model/fit.hpp"

#include "test_profiles.hpp"

using namespace xstage;

namespace {
Profile truth() { return make_profile(1200, 8e9, 150e9, 52e9, 3e6); }

// A probe-like sweep: K, V, G over all regimes, with 3% lognormal noise and 5% gross outliers.
std::vector<Sample> synthetic(const Profile& p, unsigned seed, double outlier_fraction) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.03);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<Sample> s;
  for (double K : {4.0, 16.0, 32.0, 66.0, 132.0})
    for (double V : {256e3, 1e6, 4e6, 8e6})
      for (double G : {0.0, 5e3, 20e3, 50e3, 100e3, 200e3, 500e3})
        for (int rep = 0; rep < 3; ++rep) {
          Sample m;
          m.K = K;
          m.V_bytes = V;
          m.gap_ns = G;
          m.issue_ns = predict(p, K, V, G).t_iss_ns * std::exp(noise(rng));
          if (u(rng) < outlier_fraction) m.issue_ns *= 1.5 + 3 * u(rng);  // a hiccup
          s.push_back(m);
        }
  return s;
}
}  // namespace

TEST(Fit, RecoversKnownParametersFromNoisySamplesWithOutliers) {
  const Profile t = truth();
  const auto samples = synthetic(t, 7, 0.05);
  FitOptions opt;
  opt.bootstrap = 8;
  const FitResult r = fit_profile(samples, opt);
  const Profile& p = r.profile;
  EXPECT_NEAR(p.R_Bps, t.R_Bps, 0.05 * t.R_Bps);
  EXPECT_NEAR(p.Q_bytes, t.Q_bytes, 0.05 * t.Q_bytes);
  EXPECT_NEAR(p.t0.per_producer_Bps, t.t0.per_producer_Bps, 0.05 * t.t0.per_producer_Bps);
  EXPECT_NEAR(p.t0.aggregate_Bps, t.t0.aggregate_Bps, 0.05 * t.t0.aggregate_Bps);
  // T0 itself (what the model uses) within 5% over the sampled range.
  for (double K : {4.0, 132.0})
    for (double V : {256e3, 8e6}) EXPECT_NEAR(t0_iss_ns(p, K, V), t0_iss_ns(t, K, V), 0.05 * t0_iss_ns(t, K, V));
  EXPECT_TRUE(r.R_identified);
  EXPECT_TRUE(r.Q_identified);
  EXPECT_TRUE(r.aggregate_identified);
  EXPECT_GT(r.outliers, 0);
  EXPECT_LT(r.median_abs_rel_err, 0.04);
  ASSERT_TRUE(p.sigma.has_value());
  EXPECT_GT(p.sigma->R_Bps, 0);
  EXPECT_LT(p.sigma->R_Bps, 0.05 * p.R_Bps);
  EXPECT_EQ(p.K_range->lo, 4);
  EXPECT_EQ(p.K_range->hi, 132);
}

TEST(Fit, SaysWhatTheDataCannotPinDown) {
  // Only short gaps and small V: nothing overflows a drained stage, so Q is only a lower bound.
  const Profile t = truth();
  std::vector<Sample> s;
  for (double K : {16.0, 132.0})
    for (double V : {256e3, 1e6})
      for (double G : {0.0, 2e3, 5e3, 10e3}) s.push_back({K, V, G, predict(t, K, V, G).t_iss_ns, -1, 0});
  FitOptions opt;
  opt.bootstrap = 0;
  const FitResult r = fit_profile(s, opt);
  EXPECT_FALSE(r.Q_identified);
  bool said = false;
  for (const auto& n : r.notes) said |= n.find("Q is a lower bound") != std::string::npos;
  EXPECT_TRUE(said);
  EXPECT_NEAR(r.profile.R_Bps, t.R_Bps, 0.05 * t.R_Bps);
}

TEST(Fit, LatencyFromCompletionTimes) {
  const Profile t = truth();
  auto s = synthetic(t, 3, 0.0);
  for (auto& m : s) m.complete_ns = std::max(t0_iss_ns(t, m.K, m.V_bytes), m.V_bytes / t.R_Bps * 1e9) + 1800;
  FitOptions opt;
  opt.bootstrap = 0;
  const FitResult r = fit_profile(s, opt);
  EXPECT_NEAR(r.profile.latency_ns, 1800, 400);
}

TEST(SamplesCsv, AnyColumnOrderAndMetadata) {
  const auto set = parse_samples_csv(
      "# device: NVIDIA H200\n# transport: host\nissue_ns,extra,K,gap_ns,V_bytes,stat\n"
      "1000,x,4,0,65536,run\n900,y,4,0,65536,max\n2000,z,8,100,131072,run\n",
      "in.csv");
  ASSERT_EQ(set.points.size(), 2u);  // the "max" row is one producer, not the run
  EXPECT_EQ(set.rows, 2);
  EXPECT_EQ(set.points[0].K, 4);
  EXPECT_EQ(set.points[1].V_bytes, 131072);
  EXPECT_EQ(set.points[1].line, 6);
  EXPECT_EQ(set.metadata.at("device"), "NVIDIA H200");
  EXPECT_EQ(set.metadata.at("transport"), "host");
}

TEST(SamplesCsv, MalformedInputNamesLineAndReason) {
  auto msg = [](const std::string& text) {
    try {
      parse_samples_csv(text, "bad.csv");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Every message: the file, the line, the column by number and name, and
  // what was expected there.
  EXPECT_EQ(msg("K,V_bytes,gap_ns\n1,2,3\n"),
            "bad.csv:1: header lacks column 'issue_ns'; expected a header naming K, V_bytes, gap_ns and issue_ns");
  EXPECT_EQ(msg("K,V_bytes,gap_ns,issue_ns\n1,2,3\n"),
            "bad.csv:2: 3 fields, but the header has 4; expected 4 comma-separated fields");
  EXPECT_EQ(msg("K,V_bytes,gap_ns,issue_ns\n1,abc,3,4\n"),
            "bad.csv:2: column 2 'V_bytes': 'abc' is not a finite number; expected a number of bytes");
  EXPECT_EQ(msg("K,V_bytes,gap_ns,issue_ns\n1,-5,3,4\n"),
            "bad.csv:2: column 2 'V_bytes': -5 bytes; expected at least 1 byte");
  EXPECT_EQ(msg("K,V_bytes,gap_ns,issue_ns\n0,5,3,4\n"),
            "bad.csv:2: column 1 'K': expected a whole number >= 1, got 0");
  EXPECT_EQ(msg("K,V_bytes,gap_ns,issue_ns\n1,5,-3,4\n"), "bad.csv:2: column 3 'gap_ns': expected >= 0, got -3");
  EXPECT_EQ(msg("issue_ns,gap_ns,V_bytes,K\n4,3,5,1\n4,x,5,1\n"),
            "bad.csv:3: column 2 'gap_ns': 'x' is not a finite number; expected a number of nanoseconds");
  EXPECT_EQ(msg("K,V_bytes,gap_ns,issue_ns\n8,4096,0,2e15\n"),
            "bad.csv:2: column 4 'issue_ns': 2e+15 ns; expected at most 1e+15 ns");
  EXPECT_EQ(msg("K,V_bytes,gap_ns,issue_ns\n"), "bad.csv: header but no data rows; expected at least one row");
  EXPECT_EQ(msg(""), "bad.csv: no header line; expected a header naming K, V_bytes, gap_ns and issue_ns");
  EXPECT_EQ(msg("K,V_bytes,gap_ns,issue_ns\n1,\"5,3,4\n"),
            "bad.csv:2: unterminated quoted field; expected a closing \" before the line ends");
  EXPECT_EQ(msg("K,V_bytes,K,gap_ns,issue_ns\n1,2,3,4,5\n"),
            "bad.csv:1: column 3 'K' appears twice in the header (first as column 1); expected each column once");
  EXPECT_EQ(msg("K,V_bytes,gap_ns,issue_ns,bursts,steady_from\n1,2,3,4,1e30,0\n"),
            "bad.csv:2: column 5 'bursts': 1e30; expected a whole number of bursts from 1 to 1e9");
  EXPECT_EQ(msg("K,V_bytes,gap_ns,issue_ns,bursts,steady_from\n1,2,3,4,10,10\n"),
            "bad.csv:2: column 6 'steady_from': 10; expected a whole number from 0 to bursts - 1 = 9");
  EXPECT_THROW(read_samples_csv("/nonexistent/samples.csv"), Error);
}

TEST(Fit, TooFewSamples) { EXPECT_THROW(fit_profile(std::vector<Sample>{{1, 1, 1, 1, -1, 0}}), Error); }

TEST(Tally, CountsEachDistinctValueOnceInOrder) {
  Tally t;
  // Enough values to merge several times on the way (every 4096 added values at first).
  for (int rep = 0; rep < 50; ++rep)
    for (int v = 999; v >= 0; --v) t.add(v * 0.5);
  t.add(7.25, 3);
  t.finish();
  ASSERT_EQ(t.entries().size(), 1001u);
  EXPECT_EQ(t.count(), 50003);
  for (size_t i = 1; i < t.entries().size(); ++i) EXPECT_LT(t.entries()[i - 1].value, t.entries()[i].value);
  EXPECT_EQ(t.entries()[0].value, 0);
  EXPECT_EQ(t.entries()[0].count, 50);
  for (const auto& e : t.entries())
    if (e.value == 7.25) EXPECT_EQ(e.count, 3);
  Tally u;
  u.add(0.0);
  u.finish();
  u.add(t);
  EXPECT_EQ(u.entries()[0].count, 51);
  EXPECT_EQ(u.count(), 50004);
  Tally pending;  // values added and not finished: not yet to be read or merged
  pending.add(1.0);
  EXPECT_THROW(pending.entries(), std::logic_error);
  EXPECT_THROW(u.add(pending), std::logic_error);
}

TEST(Tally, WeightedQuantileIsTheQuantileOfTheRowsWrittenOut) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> rows;
    std::vector<detail::Weighted> weighted;
    const int distinct = 1 + int(rng() % 12);
    for (int i = 0; i < distinct; ++i) {
      const double v = double(rng() % 1000) / 7, count = double(1 + rng() % 5);
      weighted.push_back({v, count});
      for (int k = 0; k < count; ++k) rows.push_back(v);
    }
    for (double q : {0.0, 0.16, 0.5, 0.84, 0.9, 0.95, 1.0})
      EXPECT_DOUBLE_EQ(detail::weighted_quantile(weighted, q), detail::quantile(rows, q)) << trial << " q " << q;
  }
}

TEST(SamplesCsv, RepeatedRowsBecomeCountsNotRows) {
  std::string text = "# transport: host\nK,V_bytes,gap_ns,issue_ns,set\n";
  for (int rep = 0; rep < 1000; ++rep)
    text += "8,1048576,0,20000,train\n8,1048576,0,21000,train\n8,1048576,5000,15000,train\n8,1048576,0,20000,holdout\n";
  const SampleSet set = parse_samples_csv(text, "big.csv");
  EXPECT_EQ(set.rows, 4000);
  ASSERT_EQ(set.points.size(), 3u);  // (G = 0, train), (G = 5000, train), (G = 0, holdout)
  EXPECT_EQ(set.points[0].line, 3);
  ASSERT_EQ(set.points[0].issue_ns.entries().size(), 2u);
  EXPECT_EQ(set.points[0].issue_ns.entries()[0].value, 20000);
  EXPECT_EQ(set.points[0].issue_ns.entries()[0].count, 1000);
  EXPECT_EQ(set.points[2].set, "holdout");
  EXPECT_EQ(set.points[2].issue_ns.count(), 1000);
}

TEST(SamplesCsv, NumbersAreWholeCellsAndFinite) {
  auto msg = [](const std::string& cell) {
    try {
      parse_samples_csv("K,V_bytes,gap_ns,issue_ns\n4," + cell + ",0,100\n", "n.csv");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(msg("65536"), "accepted");
  EXPECT_EQ(msg("+6.5e4"), "accepted");
  EXPECT_EQ(msg(" 65536 "), "accepted");
  EXPECT_EQ(msg("\"65536\""), "accepted");
  for (const std::string bad : {std::string("65536x"), std::string("1MiB"), std::string("inf"), std::string("nan"),
                                std::string("1e999"), std::string("0x10"), std::string("+-5"), std::string(""),
                                std::string("1\0garbage", 9)})
    EXPECT_NE(msg(bad).find("column 2 'V_bytes'"), std::string::npos) << bad << ": " << msg(bad);
}

TEST(Fit, RepeatedRowsCostNothingAndWeighAsTheirCount) {
  // The same points 1000 times: one distinct value each, 1000 samples each.
  const Profile t = truth();
  std::vector<Sample> once = synthetic(t, 11, 0.0), many;
  for (int rep = 0; rep < 1000; ++rep) many.insert(many.end(), once.begin(), once.end());
  const std::vector<SamplePoint> points = group_samples(many);
  ASSERT_EQ(points.size(), group_samples(once).size());
  FitOptions opt;
  opt.bootstrap = 0;
  const FitResult r = fit_profile(points, opt);
  EXPECT_EQ(r.samples, long(many.size()));
  for (const FitPoint& f : r.points) EXPECT_EQ(f.n, 3000) << f.K << " " << f.V_bytes << " " << f.gap_ns;
  EXPECT_NEAR(r.profile.R_Bps, t.R_Bps, 0.05 * t.R_Bps);
}

TEST(Fit, FreeRegimeOnlyLeavesRNotIdentifiedWhateverTheGaps) {
  // No sample drains: the issue time does not depend on the gap. A drain that
  // starts at once (Q near 0) would mimic the saturating issue rate; the fit
  // must say R is not identified rather than report that rate as R.
  for (const std::vector<double> gaps : {std::vector<double>{0, 5e3, 20e3, 100e3},
                                         std::vector<double>{0, 5e3, 20e3, 50e3, 100e3, 200e3}}) {
    std::vector<Sample> s;
    int n = 0;
    for (double K : {8.0, 32.0, 132.0})
      for (double V : {262144.0, 1048576.0, 4194304.0})
        for (double G : gaps) {
          Sample m;
          m.K = K, m.V_bytes = V, m.gap_ns = G;
          m.issue_ns = (2000 + V / std::min(K * 7e9, 50e9) * 1e9) * (1 + 0.02 * ((n++ * 7919) % 11 - 5) / 5.0);
          s.push_back(m);
        }
    FitOptions opt;
    opt.bootstrap = 8;
    const FitResult r = fit_profile(s, opt);
    EXPECT_FALSE(r.R_identified) << gaps.size() << " gaps";
    ASSERT_TRUE(r.profile.sigma.has_value());
    EXPECT_TRUE(std::isnan(r.profile.sigma->R_Bps));
    // R is the least drain rate that leaves every sample free.
    for (const Sample& m : s) EXPECT_EQ(predict(r.profile, m.K, m.V_bytes, m.gap_ns).regime, Regime::free);
    EXPECT_NEAR(r.profile.t0.aggregate_Bps, 50e9, 0.05 * 50e9);
  }
}
