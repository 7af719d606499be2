// The fused MoE layer's model (include/xstage/moe_prediction.hpp): the claim
// rules, the regime, the model-guided plan, and `xstage moe-predict` on a
// small synthetic sweep (tests/data/moe-sweep-small.json).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "test_profiles.hpp"
#include "xstage/error.hpp"
#include "xstage/moe_prediction.hpp"
#include "xstage/moe_sweep_record.hpp"

using namespace xstage;

namespace {

MoeLaunch toy_launch(std::vector<int> rows, int sms, int hidden = 512, int inter = 256) {
  MoeLaunch l;
  l.hidden = hidden;
  l.inter = inter;
  l.expert_rows = std::move(rows);
  l.sms = sms;
  l.block_m = 128;
  return l;
}

MoeSchedulePlan plan_of(MoeSchedule s, int wave_tiles, double share, int lag) {
  MoeSchedulePlan p;
  p.schedule = s;
  p.wave_tiles = wave_tiles;
  p.l2_share = share;
  p.lag_tiles = lag;
  return p;
}

// A slow, small stage: stores outrun it.
Profile slow_stage() { return make_profile(200, 50e9, 5e12, 20e9, 256 * 1024); }

// Every L2 tile is claimed after every L1 tile of its expert, and computes
// only once they are done.
void expect_dependencies(const MoeClaimSchedule& cs, size_t experts) {
  std::vector<double> l1_end(experts, 0.0);
  std::vector<int> l1_total(experts, 0), l1_seen(experts, 0);
  for (const MoeClaimedTile& t : cs.tiles)
    if (t.gemm == 1) ++l1_total[size_t(t.expert)];
  for (const MoeClaimedTile& t : cs.tiles) {
    if (t.gemm == 1) {
      ++l1_seen[size_t(t.expert)];
      l1_end[size_t(t.expert)] = std::max(l1_end[size_t(t.expert)], t.end_ns);
      continue;
    }
    ASSERT_EQ(l1_seen[size_t(t.expert)], l1_total[size_t(t.expert)]) << "L2 tile " << t.index << " of expert "
                                                                      << t.expert << " claimed too early";
    EXPECT_GE(t.start_ns, l1_end[size_t(t.expert)] - 1e-9) << "L2 tile " << t.index;
    EXPECT_GE(t.start_ns, t.claim_ns);
  }
}

}  // namespace

TEST(MoePrediction, ClaimRulesRespectDependencies) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> rows(0, 700);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int> r(9);
    for (int& x : r) x = rows(rng);
    const MoeLaunch l = toy_launch(r, 1 + trial % 13);
    for (const MoeSchedulePlan& p :
         {plan_of(MoeSchedule::expert_wave, 0, 0, 0), plan_of(MoeSchedule::expert_wave, 5, 0, 0),
          plan_of(MoeSchedule::interleaved, 0, 0, l.sms), plan_of(MoeSchedule::model_guided, 0, 0.1, 0),
          plan_of(MoeSchedule::model_guided, 0, 0.9, 3)}) {
      const MoeClaimSchedule cs = moe_claim_schedule(l, p, slow_stage());
      expect_dependencies(cs, r.size());
      size_t n1 = 0, n2 = 0;
      for (const MoeClaimedTile& t : cs.tiles) (t.gemm == 1 ? n1 : n2)++;
      EXPECT_EQ(double(n1), cs.l1_tiles);
      EXPECT_EQ(double(n2), cs.l2_tiles);
    }
  }
}

TEST(MoePrediction, ExpertWaveRunsWavesShareInterleaves) {
  // 4 experts of 256 rows: 2 m-blocks x 2 L1 n-blocks = 4 L1 tiles, 2 x 2 = 4 L2 tiles each.
  const MoeLaunch l = toy_launch({256, 256, 256, 256}, 2);
  std::string ew;
  for (const MoeClaimedTile& t : moe_claim_schedule(l, plan_of(MoeSchedule::expert_wave, 8, 0, 0), slow_stage()).tiles)
    ew += char('0' + t.gemm);
  // Waves of 8 L1 tiles: experts {0, 1}, then {2, 3}.
  EXPECT_EQ(ew, "11111111222222221111111122222222");

  const MoeClaimSchedule cs = moe_claim_schedule(l, plan_of(MoeSchedule::interleaved, 0, 0.25, 0), slow_stage());
  double w1 = 0, w2 = 0;
  std::string sh;
  for (const MoeClaimedTile& t : cs.tiles) {
    sh += char('0' + t.gemm);
    if (t.gemm == 2 && w1 < 16 * l.hidden - 1e-9) EXPECT_LE(w2, 0.25 * (w1 + w2) + 1e-9) << sh;
    (t.gemm == 1 ? w1 : w2) += t.gemm == 1 ? l.hidden : l.inter;
  }
  // Expert 0's L1 tiles first, then L2 mixed in while L1 tiles remain.
  EXPECT_EQ(sh.substr(0, 4), "1111");
  const size_t first_l2 = sh.find('2'), last_l1 = sh.rfind('1');
  EXPECT_LT(first_l2, last_l1);
  EXPECT_NE(sh.substr(first_l2, last_l1 - first_l2).find('1'), std::string::npos);
}

TEST(MoePrediction, ExpertWaveStallsWhereInterleavingSpreadsStores) {
  // Many small experts, a stage that drains at half the L2 store rate: the
  // expert-wave bursts stall, the even spread does not (rho about 2, mean rate < 1).
  const MoeLaunch l = toy_launch(std::vector<int>(64, 256), 16, 1024, 512);
  const double t2 = moe_l2_tile_ns(l, 0), b2 = 128.0 * 256 * 2;
  const double R = 16 * b2 / t2 / 2.0 * 1e9;  // rho = 2
  const Profile p = make_profile(100, 1e12, 1e14, R, 64 * 1024);
  const MoeRegime g = moe_classify_regime(l, p);
  EXPECT_NEAR(g.rho, 2.0, 1e-9);
  const auto ew = moe_predict_experts(l, plan_of(MoeSchedule::expert_wave, 0, 0, 0), p);
  const auto il = moe_predict_experts(l, plan_of(MoeSchedule::interleaved, 0, 0, l.sms), p);
  EXPECT_GT(ew.experts_ns, 1.05 * il.experts_ns);
  EXPECT_GT(ew.stalled_ns, il.stalled_ns);
  EXPECT_GE(il.experts_ns, il.compute_ns);
}

TEST(MoePrediction, RegimeClassification) {
  const MoeLaunch l = toy_launch(std::vector<int>(64, 512), 16, 1024, 512);
  const double t2 = moe_l2_tile_ns(l, 0), b2 = 128.0 * 256 * 2;
  const double rate = 16 * b2 / t2 * 1e9;  // bytes/s of 16 SMs on L2 tiles
  EXPECT_EQ(moe_classify_regime(l, make_profile(100, 1e12, 1e14, rate / 0.5, 1e6)).name, "free");
  // rho = 2: the wave's excess (half its burst) fits a large stage, not a small one.
  const MoeRegime big = moe_classify_regime(l, make_profile(100, 1e12, 1e14, rate / 2, 1e9));
  EXPECT_NEAR(big.rho, 2, 1e-9);
  EXPECT_NEAR(big.excess_bytes, big.burst_bytes / 2, 1e-6 * big.burst_bytes);
  EXPECT_EQ(big.name, "absorbed");
  EXPECT_FALSE(big.contended());
  const MoeRegime small = moe_classify_regime(l, make_profile(100, 1e12, 1e14, rate / 2, 1e4));
  EXPECT_EQ(small.name, "contended");
  EXPECT_TRUE(small.contended());
  EXPECT_LT(small.mean_rate, 1);
  // rho = 8: the mean rate outruns the drain whatever the schedule.
  const MoeRegime drain = moe_classify_regime(l, make_profile(100, 1e12, 1e14, rate / 8, 1e4));
  EXPECT_EQ(drain.name, "drain-bound");
  EXPECT_GT(drain.mean_rate, 1);
}

TEST(MoePrediction, PlanBoundsTheStoreRate) {
  const MoeLaunch l = toy_launch(std::vector<int>(32, 512), 132, 2048, 768);
  const double natural = moe_natural_l2_share(l);
  EXPECT_NEAR(natural, 1.0 / 3, 1e-9);  // L2 is a third of the work when the n-blocks divide
  const double t2 = moe_l2_tile_ns(l, 0), b2 = 128.0 * 256 * 2;
  for (double rho : {0.5, 2.0, 3.0, 4.0, 10.0}) {
    const double R = 132 * b2 / t2 * 1e9 / rho;
    const MoeSchedulePlan p = moe_plan_for_launch(l, make_profile(100, 1e12, 1e14, R, 1e6));
    EXPECT_EQ(p.schedule, MoeSchedule::model_guided);
    EXPECT_EQ(p.lag_tiles, 132);
    EXPECT_LE(p.l2_share, natural + 1e-12);
    // The store rate at that share stays <= R; at the bound it is R.
    EXPECT_LE(132 * p.l2_share * b2 / t2 * 1e9, R * (1 + 1e-9)) << rho;
    if (rho > 3) EXPECT_NEAR(p.l2_share, 1 / rho, 1e-9);
    if (rho <= 3) EXPECT_NEAR(p.l2_share, natural, 1e-9);
  }
  // The public entry point: same rule for a shape's expected rows.
  const Profile host = make_profile(100, 1e12, 1e14, 50e9, 1e6);
  Profile h = host;
  h.transport = "host";
  const MoeSchedulePlan p = moe_plan_schedule(moe_prediction_shape("qwen3-30b-a3b"), 4096, 4, 132, MoeTile::m128n256, h);
  EXPECT_GT(p.l2_share, 0);
  EXPECT_LT(p.l2_share, 1.0 / 3);
  EXPECT_THROW(moe_plan_schedule(moe_prediction_shape("mixtral-8x7b"), 0, 2, 132, MoeTile::m128n256, h), Error);
  EXPECT_THROW(moe_plan_schedule(moe_prediction_shape("mixtral-8x7b"), 64, 3, 132, MoeTile::m128n256, h), Error);
}

TEST(MoePrediction, ComputeScaleMatchesMeasuredTime) {
  MoeLaunch l = toy_launch(std::vector<int>(16, 300), 20);
  const double s = moe_scale_to_compute_only(l, 123456.0);
  l.compute_scale = s;
  EXPECT_NEAR(moe_compute_only_ns(l), 123456.0, 1e-6 * 123456.0);
  EXPECT_THROW(moe_scale_to_compute_only(l, 0), Error);
}

TEST(MoePrediction, ShapesAndTable) {
  EXPECT_EQ(moe_prediction_shapes().size(), 6u);
  const MoeShape d = moe_prediction_shape("deepseek-v3");
  EXPECT_EQ(d.hidden, 7168);
  EXPECT_EQ(d.inter, 2048);
  EXPECT_EQ(d.experts, 256);
  EXPECT_EQ(d.topk, 8);
  EXPECT_EQ(moe_prediction_shape("100/200/8/2").inter, 200);
  try {
    moe_prediction_shape("deepseek");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hidream-i1"), std::string::npos) << e.what();
  }
  // Compute-bound with several m-blocks an expert, weight-bound with one.
  EXPECT_NEAR(moe_table_tile_ns(1000, 128, 4), 13000, 1e-6);
  EXPECT_NEAR(moe_table_tile_ns(1000, 128, 1), 16900, 1e-6);
}

// ---- the command on a recorded sweep

namespace {
const std::string kSmallSweep = XSTAGE_SOURCE_DIR "/tests/data/moe-sweep-small.json";

std::string write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path.string();
}

nlohmann::json small_sweep() {
  std::ifstream in(kSmallSweep);
  return nlohmann::json::parse(in);
}
}  // namespace

TEST(MoePredictCli, RepredictsASweep) {
  const CliRun r = run_cli("moe-predict " + kSmallSweep + " --json", false);
  ASSERT_EQ(r.rc, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["configs"].size(), 2u);
  const nlohmann::json& c0 = j["configs"][0];
  EXPECT_EQ(c0["profile"], "h200-host-pcie");  // the sweep's
  EXPECT_EQ(c0["compute_source"], "compute-only less its dispatch phase");
  const nlohmann::json& ew = c0["schedulers"]["expert-wave"];
  EXPECT_NEAR(ew["measured_ms"].get<double>(), 0.30, 1e-12);  // median of the rounds
  EXPECT_NEAR(ew["error"].get<double>(), (ew["predicted_ms"].get<double>() - 0.30) / 0.30, 1e-12);
  EXPECT_EQ(c0["faster_measured"], "interleaved");
  EXPECT_EQ(j["configs"][1]["faster_measured"], "tie");  // 0.5 against 0.5
  EXPECT_EQ(j["summary"]["resolved_pairs"], 1);
  EXPECT_EQ(j["summary"]["errors"], 6);
  EXPECT_EQ(j["summary"]["paths"]["emulated/host"]["configs"], 2);
  // The model-guided plan the sweep left null is the model's own.
  EXPECT_GT(c0["schedulers"]["model-guided"]["plan"]["lag_tiles"].get<int>(), 0);
  // The recorded interleaved plan is the one predicted.
  EXPECT_NEAR(c0["schedulers"]["interleaved"]["plan"]["l2_share"].get<double>(), 0.3333, 1e-12);

  const CliRun t = run_cli("moe-predict " + kSmallSweep);
  ASSERT_EQ(t.rc, 0) << t.out;
  EXPECT_NE(t.out.find("median |error|"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("contended regime"), std::string::npos) << t.out;
}

TEST(MoePredictCli, OneConfigurationAndTheGrid) {
  const CliRun r = run_cli("moe-predict --shape qwen3-30b-a3b --tokens 512 --P 2 --placement device --json", false);
  ASSERT_EQ(r.rc, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["configs"].size(), 1u);
  EXPECT_EQ(j["configs"][0]["profile"], "h200-local");
  EXPECT_TRUE(j["configs"][0]["schedulers"]["interleaved"]["measured_ms"].is_null());
  const CliRun bad = run_cli("moe-predict --shape nope --tokens 512 --P 2");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.out.find("deepseek-v3"), std::string::npos) << bad.out;
  const CliRun both = run_cli("moe-predict " + kSmallSweep + " --grid");
  EXPECT_NE(both.rc, 0);
  EXPECT_NE(both.out.find("one of"), std::string::npos) << both.out;
}

TEST(MoePredictCli, BadSweepsSayWhatWhereAndWhatWasExpected) {
  struct Case {
    std::string name, text, expect;
  };
  nlohmann::json no_configs = small_sweep();
  no_configs.erase("configs");
  nlohmann::json bad_tokens = small_sweep();
  bad_tokens["configs"][1]["tokens"] = 12.5;
  nlohmann::json bad_P = small_sweep();
  bad_P["configs"][0]["P"] = 3;
  nlohmann::json bad_rows = small_sweep();
  bad_rows["configs"][0]["rows_per_rank"] = {1, 2, 3};
  nlohmann::json bad_ms = small_sweep();
  bad_ms["configs"][0]["ms"]["fused/interleaved"] = {0.1, "fast"};
  nlohmann::json bad_backend = small_sweep();
  bad_backend["configs"][0]["backend"] = "mpi";
  nlohmann::json no_ms = small_sweep();
  no_ms["configs"][1].erase("ms");
  for (const Case& c : std::vector<Case>{
           {"moe-bad-1.json", "{ not json", "not JSON"},
           {"moe-bad-2.json", no_configs.dump(), "no \"configs\""},
           {"moe-bad-3.json", bad_tokens.dump(), "configs[1]: \"tokens\" must be a whole number"},
           {"moe-bad-4.json", bad_P.dump(), "configs[0]: \"P\" = 3 must divide the 8 experts"},
           {"moe-bad-5.json", bad_rows.dump(), "configs[0]: \"rows_per_rank\" must be a list of P = 2"},
           {"moe-bad-6.json", bad_ms.dump(), "configs[0]: ms: \"fused/interleaved\" must be a list of finite times"},
           {"moe-bad-7.json", bad_backend.dump(), "\"backend\" must be emulated, peer or nccl"},
           {"moe-bad-8.json", no_ms.dump(), "configs[1]: no \"ms\""},
       }) {
    const std::string path = write_temp(c.name, c.text);
    const CliRun r = run_cli("moe-predict " + path);
    EXPECT_EQ(r.rc, 2) << c.name << ": " << r.out;
    EXPECT_NE(r.out.find(path), std::string::npos) << c.name << ": " << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.name << ": " << r.out;
    std::filesystem::remove(path);
  }
  const CliRun missing = run_cli("moe-predict /nonexistent/moe-sweep.json");
  EXPECT_NE(missing.rc, 0);
  EXPECT_NE(missing.out.find("/nonexistent/moe-sweep.json"), std::string::npos) << missing.out;
  EXPECT_THROW(parse_moe_sweep("[]", "x.json"), Error);
}
