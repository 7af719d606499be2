// The fused MoE layer's model (include/xstage/moe/moe_prediction.hpp): the claim
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
#include "device/moe/fused_layer_params.hpp"  // kFusedCopyBlockRows
#include "test_profiles.hpp"
#include "xstage/core/error.hpp"
#include "xstage/model/model.hpp"
#include "xstage/moe/moe_prediction.hpp"
#include "xstage/moe/moe_sweep_record.hpp"

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
  std::string sh;
  for (const MoeClaimedTile& t : cs.tiles) sh += char('0' + t.gemm);
  // Expert 0's L1 tiles first, then L2 mixed in while L1 tiles remain.
  EXPECT_EQ(sh.substr(0, 4), "1111");
  const size_t first_l2 = sh.find('2'), last_l1 = sh.rfind('1');
  EXPECT_LT(first_l2, last_l1);
  EXPECT_NE(sh.substr(first_l2, last_l1 - first_l2).find('1'), std::string::npos);
}

namespace {
// The kernel's share rule (sched/layer_claims.cuh), written out again: which
// GEMM the next claim takes with t1 L1 and t2 L2 tiles claimed.
int kernel_share_rule(const MoeLaunch& l, const std::vector<int>& l2_expert, const std::vector<int>& last_l1, long t1,
                      long t2, long total1, long t1_start, float share, int lag) {
  const long total2 = long(l2_expert.size());
  if (t1 >= total1) return t2 < total2 ? 2 : 0;
  if (t2 >= total2) return 1;
  const float w1 = float(std::max(t1 - t1_start, 0L)) * float(l.hidden), w2 = float(t2) * float(l.inter);
  const bool want = w2 <= share * (w1 + w2);
  const bool allowed = t1 >= long(last_l1[size_t(l2_expert[size_t(t2)])]) + 1 + lag;
  return want && allowed ? 2 : 1;
}
}  // namespace

TEST(MoePrediction, ShareRuleIsTheKernels) {
  // Few, large experts (and an empty one) and many small ones; the default
  // spread and set shares; lags below and above an expert's L1 tiles.
  const std::vector<std::vector<int>> launches = {{1000, 0, 1000, 700}, {300, 200, 100, 1, 256, 90, 500, 129}};
  for (const std::vector<int>& rows : launches)
    for (int lag : {0, 3, 16, 200})
      for (double set_share : {0.0, 0.1, 0.5}) {
        const MoeLaunch l = toy_launch(rows, 7);
        // Tile lists as the kernel orders them: expert, n-block, m-block.
        std::vector<int> l2_expert, last_l1(rows.size(), -1);
        long total1 = 0, first_end = -1;
        for (size_t e = 0; e < rows.size(); ++e) {
          const int mb = (rows[e] + 127) / 128;
          total1 += long(mb) * (2 * l.inter / 256);
          if (mb > 0) last_l1[e] = int(total1 - 1);
          if (mb > 0 && first_end < 0) first_end = total1;
          for (int i = 0; i < mb * (l.hidden / 256); ++i) l2_expert.push_back(int(e));
        }
        const long t1_start = std::min(std::max(first_end, 0L) + lag, total1);
        EXPECT_EQ(moe_share_start_tiles(l, lag), t1_start);
        float share = float(set_share);
        if (share <= 0.f) {
          const float w1 = float(total1 - t1_start) * float(l.hidden), w2 = float(l2_expert.size()) * float(l.inter);
          share = w2 / (w1 + w2);
          EXPECT_EQ(float(moe_default_l2_share(l, lag)), share);
        }
        const MoeClaimSchedule cs = moe_claim_schedule(l, plan_of(MoeSchedule::interleaved, 0, set_share, lag), slow_stage());
        long t1 = 0, t2 = 0;
        for (const MoeClaimedTile& t : cs.tiles) {
          ASSERT_EQ(t.gemm, kernel_share_rule(l, l2_expert, last_l1, t1, t2, total1, t1_start, share, lag))
              << "claim " << t1 + t2 << " (lag " << lag << ", share " << set_share << ")";
          (t.gemm == 1 ? t1 : t2)++;
        }
        EXPECT_EQ(t1, total1);
        EXPECT_EQ(t2, long(l2_expert.size()));
      }
}

TEST(MoePrediction, EvenSpreadHasNoBurstAfterTheFirstLargeExpert) {
  // Four experts of 2048 rows: 16 m-blocks x 2 L1 n-blocks = 32 L1 tiles and 32
  // L2 tiles each. Expert 0's L2 tiles may go from L1 tile 32 + lag on. Counted
  // from the launch's first claim, L2 would be a third of 40 L1 tiles' work
  // behind there and claim all 32 in a row; counted from there, L1 and L2
  // alternate until expert 1's L2 tiles may go (L1 tile 64 + lag).
  const MoeLaunch l = toy_launch({2048, 2048, 2048, 2048}, 8);
  const int lag = 8;
  ASSERT_EQ(moe_share_start_tiles(l, lag), 32 + lag);
  const MoeClaimSchedule cs = moe_claim_schedule(l, plan_of(MoeSchedule::interleaved, 0, 0, lag), slow_stage());
  int run = 0, longest = 0, l2_before_next = 0;
  long n1 = 0;
  for (const MoeClaimedTile& t : cs.tiles) {
    if (n1 >= 64 + lag) break;
    if (t.gemm == 1) {
      ++n1;
      run = 0;
      continue;
    }
    ASSERT_GE(n1, 32 + lag);
    longest = std::max(longest, ++run);
    ++l2_before_next;
  }
  EXPECT_LE(longest, 2);
  EXPECT_GT(l2_before_next, 8);  // and L2 did go meanwhile
}

TEST(MoePrediction, ClaimsFollowTheStalls) {
  // Each SM claims its next tile when its last one, store included, is done.
  const MoeLaunch l = toy_launch(std::vector<int>(24, 384), 6, 1024, 512);
  const Profile p = slow_stage();
  const MoeClaimSchedule cs = moe_claim_schedule(l, plan_of(MoeSchedule::interleaved, 0, 0, 6), p);
  std::vector<double> free_at(6, 0.0);
  double stored = 0;
  for (const MoeClaimedTile& t : cs.tiles) {
    EXPECT_NEAR(t.claim_ns, free_at[size_t(t.sm)], 1e-6 * t.claim_ns + 1e-6);
    free_at[size_t(t.sm)] = t.end_ns;
    if (t.gemm == 2) {
      // Compute, then the store through the stage: no faster than its T0.
      EXPECT_GE(t.end_ns - t.start_ns, moe_l2_tile_ns(l, t.expert) - 1e-6);
      stored += t.store_bytes;
    }
  }
  EXPECT_NEAR(stored, cs.store_bytes, 1e-9 * stored);
  EXPECT_GT(cs.stalled_ns, 0);
  EXPECT_GE(cs.drained_ns, stored / p.R_Bps * 1e9);
  EXPECT_GE(cs.drained_ns, cs.makespan_ns);
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

TEST(MoePrediction, PlanIsTheFastestCandidate) {
  const Profile host = *find_embedded_profile("h200-host-pcie");
  const Profile local = *find_embedded_profile("h200-local");
  struct Case {
    MoeLaunch launch;
    const Profile* profile;
  };
  const std::vector<Case> cases = {
      {toy_launch(std::vector<int>(32, 512), 132, 2048, 768), &host},    // rho > 3: the cap is a candidate
      {toy_launch(std::vector<int>(16, 256), 132, 4096, 1536), &local},  // free
      {toy_launch({4096, 4096, 4096, 4096}, 132, 2560, 6912), &host},     // few, large experts
      {toy_launch(std::vector<int>(64, 32), 132, 2048, 768), &local},    // one short m-block an expert
      {toy_launch({100, 300, 0, 256, 256}, 132, 4096, 1536), &local},    // free, short: expert-wave
  };
  for (const Case& c : cases) {
    const MoeLaunch& l = c.launch;
    const std::vector<MoePlanCandidate> cands = moe_plan_candidates(l, *c.profile);
    ASSERT_GE(cands.size(), 1u);
    // The default first: the even spread, lag G.
    EXPECT_EQ(cands[0].plan.schedule, MoeSchedule::interleaved);
    EXPECT_EQ(cands[0].plan.l2_share, 0);
    EXPECT_EQ(cands[0].plan.lag_tiles, l.sms);
    const double rho = moe_rho(l, *c.profile);
    bool capped = false;
    for (const MoePlanCandidate& k : cands) {
      // What the candidate list says is what the prediction says.
      EXPECT_NEAR(k.experts_ns, moe_predict_experts(l, k.plan, *c.profile).experts_ns, 1e-9 * k.experts_ns) << k.why;
      EXPECT_TRUE(k.plan.schedule == MoeSchedule::expert_wave || k.plan.schedule == MoeSchedule::interleaved);
      if (k.plan.schedule == MoeSchedule::interleaved && k.plan.l2_share > 0) {
        capped = true;
        EXPECT_NEAR(k.plan.l2_share, 1 / rho, 1e-12);
      }
    }
    EXPECT_EQ(capped, rho > 1 && 1 / rho < moe_default_l2_share(l, l.sms)) << rho;
    // The fastest, unless within the tie of the default.
    const MoeSchedulePlan plan = moe_plan_for_launch(l, *c.profile);
    const MoePlanCandidate* best = &cands[0];
    for (const MoePlanCandidate& k : cands)
      if (k.experts_ns < best->experts_ns) best = &k;
    const bool keep_default = best->experts_ns >= (1 - kMoePlanTie) * cands[0].experts_ns;
    MoeSchedulePlan want = keep_default ? cands[0].plan : best->plan;
    // A free stage and short experts: compute order alone, expert-wave.
    if (rho <= 1 && moe_mean_l1_tiles(l) <= kMoeWaveExpertTiles * l.sms) {  // whatever the candidates
      want = MoeSchedulePlan{};
      want.schedule = MoeSchedule::expert_wave;
    }
    EXPECT_EQ(plan.schedule, want.schedule);
    EXPECT_EQ(plan.l2_share, want.l2_share);
    EXPECT_EQ(plan.lag_tiles, want.lag_tiles);
    EXPECT_EQ(plan.wave_tiles, want.wave_tiles);
  }
  // rho > 3 on the host path: the cap is among the candidates.
  EXPECT_GT(moe_rho(cases[0].launch, host), 3);
  // Larger lags are tried only where the default's L2 tiles wait for L1 tiles.
  for (const Case& c : cases) {
    MoeSchedulePlan d = plan_of(MoeSchedule::interleaved, 0, 0, c.launch.sms);
    const MoeClaimSchedule first = moe_claim_schedule(c.launch, d, *c.profile, false);
    const bool idle = first.idle_ns > kMoePlanIdle * c.launch.sms * first.makespan_ns;
    bool larger = false;
    for (const MoePlanCandidate& k : moe_plan_candidates(c.launch, *c.profile))
      larger = larger || (k.plan.schedule == MoeSchedule::interleaved && k.plan.lag_tiles > c.launch.sms);
    EXPECT_EQ(larger, idle);
  }
}

TEST(MoePrediction, FreeStageAndShortExpertsRunExpertWave) {
  const Profile host = *find_embedded_profile("h200-host-pcie");
  const Profile local = *find_embedded_profile("h200-local");
  // inter 1536: 12 n-blocks of L1. Experts of 1 and 3 m-blocks (100, 300
  // rows) and an empty one: 24 L1 tiles an expert on average, <= 132 / 4;
  // rho <= 1 on the GPU's own memory: expert-wave.
  const MoeLaunch shortl = toy_launch({100, 300, 0, 256, 256}, 132, 4096, 1536);
  EXPECT_DOUBLE_EQ(moe_mean_l1_tiles(shortl), 24.0);
  ASSERT_LE(moe_rho(shortl, local), 1);
  const MoeSchedulePlan a = moe_plan_for_launch(shortl, local);
  EXPECT_EQ(a.schedule, MoeSchedule::expert_wave);
  EXPECT_EQ(a.wave_tiles, 0);
  // Three m-blocks an expert: 36 > 33 L1 tiles, the interleaved default again.
  const MoeLaunch longer = toy_launch({300, 300, 300, 300}, 132, 4096, 1536);
  EXPECT_DOUBLE_EQ(moe_mean_l1_tiles(longer), 36.0);
  ASSERT_LE(moe_rho(longer, local), 1);
  EXPECT_EQ(moe_plan_for_launch(longer, local).schedule, MoeSchedule::interleaved);
  // The short experts where the stage limits (PCIe, rho > 1): the model's candidates decide, never this rule.
  ASSERT_GT(moe_rho(shortl, host), 1);
  const MoeSchedulePlan h = moe_plan_for_launch(shortl, host);
  bool from_candidates = false;
  for (const MoePlanCandidate& k : moe_plan_candidates(shortl, host))
    from_candidates = from_candidates || (k.plan.schedule == h.schedule && k.plan.lag_tiles == h.lag_tiles &&
                                          k.plan.l2_share == h.l2_share);
  EXPECT_TRUE(from_candidates);
  EXPECT_EQ(h.schedule, MoeSchedule::interleaved);
  EXPECT_EQ(moe_mean_l1_tiles(toy_launch({0, 0}, 4)), 0.0);
  MoeLaunch bad = shortl;
  bad.block_n = 0;
  EXPECT_THROW(moe_mean_l1_tiles(bad), Error);
}

TEST(MoePrediction, ModelGuidedIsPredictedAtLeastAsFastAsBoth) {
  // Without a recorded plan the model-guided scheduler runs moe_plan_schedule's
  // plan: predicted within the tie of the better of expert-wave and interleaved.
  for (const char* placement : {"host", "device"})
    for (const char* shape : {"qwen3-30b-a3b", "mixtral-8x7b", "hidream-i1"})
      for (int T : {256, 2048}) {
        MoeConfig c;
        c.shape = moe_prediction_shape(shape);
        c.tokens = T;
        c.P = 2;
        c.placement = placement;
        const Profile p = *find_embedded_profile(moe_default_profile(c));
        const MoeConfigPrediction r = predict_moe_config(c, p);
        const double ew = r.schedulers.at(MoeSchedule::expert_wave).experts_ns;
        const double il = r.schedulers.at(MoeSchedule::interleaved).experts_ns;
        const MoeLayerPrediction& mg = r.schedulers.at(MoeSchedule::model_guided);
        if (mg.plan.schedule == MoeSchedule::expert_wave)  // the free stage's compute-order rule
          EXPECT_EQ(r.regime.name, "free") << shape << " T " << T << " " << placement;
        else
          EXPECT_LE(mg.experts_ns, std::min(ew, il) * (1 + kMoePlanTie) + 1e-6)
              << shape << " T " << T << " " << placement;
        const MoeSchedulePlan direct = moe_plan_schedule(c.shape, T, 2, 132, MoeTile::automatic, p);
        EXPECT_EQ(mg.plan.schedule, direct.schedule);
        EXPECT_EQ(mg.plan.lag_tiles, direct.lag_tiles);
        EXPECT_EQ(mg.plan.l2_share, direct.l2_share);
      }
  const Profile host = *find_embedded_profile("h200-host-pcie");
  EXPECT_THROW(moe_plan_schedule(moe_prediction_shape("mixtral-8x7b"), 0, 2, 132, MoeTile::m128n256, host), Error);
  EXPECT_THROW(moe_plan_schedule(moe_prediction_shape("mixtral-8x7b"), 64, 3, 132, MoeTile::m128n256, host), Error);
}

TEST(MoePrediction, ComputeScaleMatchesMeasuredTime) {
  MoeLaunch l = toy_launch(std::vector<int>(16, 300), 20);
  const double s = moe_scale_to_compute_only(l, 123456.0);
  l.compute_scale = s;
  EXPECT_NEAR(moe_compute_only_ns(l), 123456.0, 1e-6 * 123456.0);
  EXPECT_THROW(moe_scale_to_compute_only(l, 0), Error);
}

// The fused kernel's own row copies: each expert's rows are in the pool once
// the bytes before and of it (pool order) have been read at the path's R
// (and the local share at h200-local's R); an L1 tile waits for them.
TEST(MoePrediction, DuplexCopiesShareTheLinkWithTheStores) {
  // The stores take up to duplex_store, the copies the rest of the sum.
  const Profile p = slow_stage();
  Profile d = p;
  d.duplex_read_Bps = 0.3 * p.R_Bps;
  d.duplex_store_Bps = p.R_Bps;
  MoeLaunch l = toy_launch({300, 0, 500, 128, 400, 256}, 4);
  l.copy_path_fraction = 1;
  const std::vector<double> alone = moe_rows_ready_ns(l, p);  // reads at R
  for (MoeSchedule s : {MoeSchedule::expert_wave, MoeSchedule::interleaved}) {
    const MoeSchedulePlan plan = plan_of(s, 0, 0, s == MoeSchedule::expert_wave ? 0 : 4);
    const MoeClaimSchedule a = moe_claim_schedule(l, plan, p), b = moe_claim_schedule(l, plan, d);
    expect_dependencies(b, 6);
    // The copy times settle to well under the plan's 1% tie (the claims are
    // discrete: a fixed point may sit between two schedules).
    EXPECT_LT(b.copies_unsettled, 0.01);
    EXPECT_EQ(a.copies_unsettled, 0.0);  // nothing to settle without duplex
    // Reads never beat R: no L1 tile starts before the blocks of rows it
    // reads could be read alone (pool order, 64-row blocks, at R).
    const double row_ns = l.hidden * 2.0 / p.R_Bps * 1e9;
    const int64_t rows = 300 + 500 + 128 + 400 + 256;
    for (const MoeClaimedTile& t : b.tiles)
      if (t.gemm == 1) {
        const int64_t last_block = (t.row0 + t.rows - 1) / l.copy_block_rows;
        EXPECT_GE(t.start_ns, double(std::min((last_block + 1) * l.copy_block_rows, rows)) * row_ns - 1e-6);
      }
    // Sharing the link slows the copies: more waiting for rows, a later end.
    EXPECT_GT(b.rows_wait_ns, a.rows_wait_ns);
    EXPECT_GT(b.drained_ns, a.drained_ns);
    // Nothing stored through the stage: nothing to share with, the reads run at R.
    MoeLaunch none = l;
    none.remote_fraction = 0;
    const MoeClaimSchedule c = moe_claim_schedule(none, plan, p), e = moe_claim_schedule(none, plan, d);
    EXPECT_DOUBLE_EQ(c.makespan_ns, e.makespan_ns);
    EXPECT_DOUBLE_EQ(c.rows_wait_ns, e.rows_wait_ns);
  }
  // Copy warps that read slower than R alone (few loads in flight): the copies take that rate.
  Profile few = d;
  few.duplex_read_alone_Bps = 0.5 * p.R_Bps;
  EXPECT_NEAR(moe_rows_ready_ns(l, few).back(), 2 * alone.back(), 1e-6 * alone.back());
  few.duplex_read_alone_Bps = 5 * p.R_Bps;  // never above R
  EXPECT_NEAR(moe_rows_ready_ns(l, few).back(), alone.back(), 1e-6 * alone.back());
  // A profile without duplex keeps the old model exactly.
  Profile half = d;
  half.duplex_read_Bps = half.duplex_store_Bps = 0;
  const MoeSchedulePlan il = plan_of(MoeSchedule::interleaved, 0, 0, 4);
  EXPECT_DOUBLE_EQ(moe_claim_schedule(l, il, half).drained_ns, moe_claim_schedule(l, il, p).drained_ns);
}

// The model's copied-rows blocks are the fused kernel's.
TEST(MoePrediction, CopyBlocksAreTheKernels) {
  EXPECT_EQ(MoeLaunch{}.copy_block_rows, moe::kFusedCopyBlockRows);
  MoeLaunch bad = toy_launch({300}, 4);
  bad.copy_block_rows = 0;
  EXPECT_THROW(moe_claim_schedule(bad, plan_of(MoeSchedule::interleaved, 0, 0, 4), slow_stage()), Error);
}

TEST(MoePrediction, InKernelCopiesGateL1Tiles) {
  const Profile p = slow_stage();
  MoeLaunch l = toy_launch({300, 0, 500, 128}, 4);
  for (double r : moe_rows_ready_ns(l, p)) EXPECT_EQ(r, 0.0);  // the pull kernel copied them
  l.copy_path_fraction = 1;
  const std::vector<double> ready = moe_rows_ready_ns(l, p);
  ASSERT_EQ(ready.size(), 4u);
  const double row_ns = 512 * 2.0 / p.R_Bps * 1e9;
  EXPECT_NEAR(ready[0], 300 * row_ns, 1e-9);
  EXPECT_NEAR(ready[1], 300 * row_ns, 1e-9);  // no rows: ready with the expert before
  EXPECT_NEAR(ready[2], 800 * row_ns, 1e-9);
  EXPECT_NEAR(ready[3], 928 * row_ns, 1e-9);
  // Half the rows local (one rank a GPU, P = 2): two streams, the slower sets the time.
  MoeLaunch half = l;
  half.copy_path_fraction = half.copy_local_fraction = 0.5;
  EXPECT_NEAR(moe_rows_ready_ns(half, p)[3], 464 * row_ns, 1e-6 * 464 * row_ns);

  for (MoeSchedule s : {MoeSchedule::expert_wave, MoeSchedule::interleaved}) {
    const MoeSchedulePlan plan = plan_of(s, 0, 0, s == MoeSchedule::expert_wave ? 0 : 4);
    const MoeClaimSchedule cs = moe_claim_schedule(l, plan, p);
    expect_dependencies(cs, 4);
    double first_l1 = 1e300;
    for (const MoeClaimedTile& t : cs.tiles) {
      if (t.gemm != 1) continue;
      // The tile waits for every block of copy_block_rows (64) rows it reads, not its whole expert.
      const int64_t last_block = (t.row0 + t.rows - 1) / l.copy_block_rows;
      const double rows_in = double(std::min<int64_t>((last_block + 1) * l.copy_block_rows, 928));
      EXPECT_GE(t.start_ns, rows_in * row_ns - 1e-9) << "L1 tile " << t.index << " before its rows";
      EXPECT_GE(t.start_ns, t.claim_ns);
      first_l1 = std::min(first_l1, t.start_ns);
    }
    // Expert 0's first m-block (rows 0 .. 127): two blocks, before the expert's 300 rows are in.
    EXPECT_NEAR(first_l1, 128 * row_ns, 1e-9);
    EXPECT_LT(first_l1, ready[0]);
    EXPECT_GT(cs.rows_wait_ns, 0);
    // The last expert's L1 and L2 tiles come after its rows.
    EXPECT_GT(cs.makespan_ns, ready[3] + moe_l1_tile_ns(l, 3) + moe_l2_tile_ns(l, 3) - 1e-6);
    // Without copies the same plan never waits for rows and ends earlier.
    MoeLaunch none = l;
    none.copy_path_fraction = 0;
    const MoeClaimSchedule base = moe_claim_schedule(none, plan, p);
    EXPECT_EQ(base.rows_wait_ns, 0);
    EXPECT_LT(base.drained_ns, cs.drained_ns);
    // The floor (compute-only) copies nothing: the pull kernel did.
    EXPECT_EQ(moe_compute_only_ns(l), moe_compute_only_ns(none));
  }
  // Copies much faster than the compute cost almost nothing.
  Profile fast = p;
  fast.R_Bps = 1e15;
  MoeLaunch quick = l;
  const MoeClaimSchedule a = moe_claim_schedule(quick, plan_of(MoeSchedule::interleaved, 0, 0, 4), fast);
  quick.copy_path_fraction = 0;
  const MoeClaimSchedule b = moe_claim_schedule(quick, plan_of(MoeSchedule::interleaved, 0, 0, 4), fast);
  EXPECT_NEAR(a.drained_ns, b.drained_ns, 1e-3 * b.drained_ns);

  MoeLaunch bad = l;
  bad.copy_local_fraction = 0.5;  // 1.5 of the rows
  EXPECT_THROW(moe_claim_schedule(bad, plan_of(MoeSchedule::interleaved, 0, 0, 4), p), Error);
  EXPECT_THROW(moe_rows_ready_ns(bad, p), Error);
}

// The fused variant's dispatch phase only routes and plans; its rows are
// read in the experts phase. Emulated host: all of them over PCIe there.
TEST(MoePrediction, FusedDispatchPlansOnlyAndTheExpertsReadTheRows) {
  MoeConfig c;
  c.shape = moe_prediction_shape("qwen3-30b-a3b");
  c.tokens = 4096;
  c.P = 2;
  const Profile& host = *find_embedded_profile("h200-host-pcie");
  const MoeConfigPrediction pr = predict_moe_config(c, host);
  const MoeLayerPrediction& il = pr.schedulers.at(MoeSchedule::interleaved);
  const double rows_over_R_ns = pr.bytes_dispatch / host.R_Bps * 1e9;
  EXPECT_LT(il.dispatch_ns, 0.1 * rows_over_R_ns);
  EXPECT_GT(il.experts_ns, rows_over_R_ns);  // the last expert's L1, L2 and stores follow its rows
  EXPECT_GT(il.rows_wait_ns, 0);
  const std::vector<MoeLaunch> ls = moe_config_launches(c);
  ASSERT_EQ(ls.size(), 1u);
  EXPECT_EQ(ls[0].copy_path_fraction, 1);
  c.backend = "peer";
  for (const MoeLaunch& l : moe_config_launches(c)) {
    EXPECT_DOUBLE_EQ(l.copy_path_fraction, 0.5);
    EXPECT_DOUBLE_EQ(l.copy_local_fraction, 0.5);
  }
}

// A recorded interleaved plan with lag 0 runs lag = the grid's SM count
// (moe_layer.hpp, moe_layer_run.cpp); the prediction mirrors that.
TEST(MoePrediction, RecordedInterleavedLagZeroIsTheGrid) {
  MoeConfig c;
  c.shape = moe_prediction_shape("qwen3-30b-a3b");
  c.tokens = 2048;
  c.P = 2;
  c.placement = "device";
  const Profile& local = *find_embedded_profile("h200-local");
  const MoeConfigPrediction def = predict_moe_config(c, local);
  c.plans[MoeSchedule::interleaved] = plan_of(MoeSchedule::interleaved, 0, 0, 0);
  const MoeConfigPrediction rec = predict_moe_config(c, local);
  EXPECT_EQ(rec.schedulers.at(MoeSchedule::interleaved).plan.lag_tiles, c.sms);
  EXPECT_DOUBLE_EQ(rec.schedulers.at(MoeSchedule::interleaved).experts_ns,
                   def.schedulers.at(MoeSchedule::interleaved).experts_ns);
  c.plans[MoeSchedule::interleaved] = plan_of(MoeSchedule::interleaved, 0, 0, 7);
  EXPECT_EQ(predict_moe_config(c, local).schedulers.at(MoeSchedule::interleaved).plan.lag_tiles, 7);
}

TEST(MoePrediction, ShapesAndTable) {
  EXPECT_EQ(moe_prediction_shapes().size(), 6u);
  const MoeShape d = moe_prediction_shape("deepseek-v3");
  EXPECT_EQ(d.hidden, 7168);
  EXPECT_EQ(d.inter, 2048);
  EXPECT_EQ(d.experts, 256);
  EXPECT_EQ(d.topk, 8);
  EXPECT_EQ(moe_prediction_shape("100/200/8/2").inter, 200);
  // The layer's names, and the same shapes as the layer's table.
  for (const MoeShape& s : moe_known_shapes()) {
    const MoeShape m = moe_prediction_shape(s.name);
    EXPECT_EQ(m.name, s.name);
    EXPECT_EQ(m.hidden, s.hidden) << s.name;
    EXPECT_EQ(m.inter, s.inter) << s.name;
    EXPECT_EQ(m.experts, s.experts) << s.name;
    EXPECT_EQ(m.topk, s.topk) << s.name;
  }
  EXPECT_EQ(moe_prediction_shape("qwen3-235b-a22b").name, "qwen3-235b");  // moe-gemm's name
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
  EXPECT_EQ(c0["schedulers"]["interleaved"]["plan"]["schedule"], "interleaved");
  const std::string mg = c0["schedulers"]["model-guided"]["plan"]["schedule"];
  EXPECT_TRUE(mg == "interleaved" || mg == "expert-wave") << mg;

  // A recorded model-guided plan that ran as expert-wave is predicted as expert-wave.
  nlohmann::json ran_waves = small_sweep();
  ran_waves["configs"][0]["plans"]["model-guided"] = ran_waves["configs"][0]["plans"]["expert-wave"];
  const std::string path = write_temp("moe-mg-waves.json", ran_waves.dump());
  const CliRun w = run_cli("moe-predict " + path + " --json", false);
  ASSERT_EQ(w.rc, 0) << w.out;
  const nlohmann::json wj = nlohmann::json::parse(w.out)["configs"][0]["schedulers"];
  EXPECT_EQ(wj["model-guided"]["predicted_ms"], wj["expert-wave"]["predicted_ms"]);
  EXPECT_EQ(wj["model-guided"]["plan"]["schedule"], "expert-wave");
  std::filesystem::remove(path);

  // The faster measured comes from the paired rounds: rounds 1-2 of expert-wave ran 3-4% faster than
  // interleaved's, round 3 (a clock dip in interleaved's turn) 25% slower; the medians alone would call
  // interleaved 24% faster.
  nlohmann::json clocked = small_sweep();
  clocked["configs"][0]["ms"]["fused/expert-wave"] = {1.00, 1.30, 1.31};
  clocked["configs"][0]["ms"]["fused/interleaved"] = {1.04, 1.34, 1.05};
  const std::string cpath = write_temp("moe-paired.json", "");
  // The first configuration as moe-predict re-predicts `sweep` (null if the command failed).
  auto first_config = [&](const nlohmann::json& sweep) {
    std::ofstream(cpath) << sweep.dump();
    const CliRun run = run_cli("moe-predict " + cpath + " --json", false);
    EXPECT_EQ(run.rc, 0) << run.out;
    return run.rc == 0 ? nlohmann::json::parse(run.out)["configs"][0] : nlohmann::json();
  };
  nlohmann::json pc = first_config(clocked);  // not const: a failed run leaves null, and [] then reads null
  EXPECT_EQ(pc["faster_measured"], "expert-wave");
  EXPECT_NEAR(pc["measured_ew_over_il"]["paired"].get<double>(), 1.30 / 1.34, 1e-12);
  EXPECT_NEAR(pc["measured_ew_over_il"]["medians"].get<double>(), 1.30 / 1.05, 1e-12);
  // Rounds not paired one to one: the medians decide.
  clocked["configs"][0]["ms"]["fused/interleaved"] = {1.04, 1.34};
  nlohmann::json uc = first_config(clocked);
  EXPECT_TRUE(uc["measured_ew_over_il"]["paired"].is_null());
  EXPECT_EQ(uc["faster_measured"], "interleaved");  // 1.30 against 1.19
  // A round skipped (null) in one variant: equal counts, but the rounds no longer line up.
  clocked["configs"][0]["ms"]["fused/expert-wave"] = {1.00, nullptr, 1.31};
  clocked["configs"][0]["ms"]["fused/interleaved"] = {1.04, 1.44};
  nlohmann::json kc = first_config(clocked);
  EXPECT_TRUE(kc["measured_ew_over_il"]["paired"].is_null());
  EXPECT_EQ(kc["faster_measured"], "expert-wave");  // medians 1.155 against 1.24
  std::filesystem::remove(cpath);

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
           {"moe-bad-4.json", bad_P.dump(), "configs[0]: \"P\" = 3 does not divide the 8 experts; expected a divisor of them"},
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
