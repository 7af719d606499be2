#include <gtest/gtest.h>

#include <cmath>

#include "xstage/core/error.hpp"
#include "xstage/model/profile.hpp"
#include "xstage/model/simulator.hpp"
#include "xstage/ulysses/ulysses_layout.hpp"
#include "xstage/ulysses/ulysses_store_paths.hpp"

#include "test_profiles.hpp"

using namespace xstage;

namespace {

StageConfig slow_stage() {
  StageConfig c;
  c.R_Bps = 1e9;  // 1 byte per ns
  c.Q_bytes = 1e9;
  c.issue.fixed_ns = 0;
  c.issue.per_producer_Bps = 1e12;
  c.issue.aggregate_Bps = 1e12;
  return c;
}

StorePathKernel host_kernel(int64_t S, double attention_only_us) {
  UlyssesShape shape;
  shape.P = 8;
  shape.S = S;
  shape.H = 24;
  shape.D = 128;
  return wgmma_store_path_kernel(ulysses_kernel_shape(shape, true, 0, 128, 132, attention_only_us), S, 128);
}

}  // namespace

TEST(WaitDrain, WaitsForTheBytesStoredBeforeIt) {
  // 1 MB accepted in 1 us into a stage that drains 1 B/ns: the wait ends when
  // the stage has drained it (1e6 ns), not after its 10 ns of compute.
  Program p;
  p.steps = {Step::store(1e6), Step::wait_drain(10), Step::compute(5)};
  const SimResult r = simulate(slow_stage(), {p});
  EXPECT_NEAR(r.total_ns, 1e6 + 5, 2.0);
  EXPECT_NEAR(r.drain_wait_ns, 1e6 - 1000 - 10, 2.0);
}

TEST(WaitDrain, OnAnEmptyStageIsCompute) {
  Program p;
  p.steps = {Step::wait_drain(300), Step::compute(5)};
  const SimResult r = simulate(slow_stage(), {p});
  EXPECT_NEAR(r.total_ns, 305, 1e-6);
  EXPECT_EQ(r.drain_wait_ns, 0);
}

TEST(WaitDrain, FirstInFirstOut) {
  // Producer 0 stores 1 MB (0-1 us) and waits; producer 1 stores 1 MB after
  // it (5-6 us) and waits too. The first waits for its own MB only (until
  // 1 ms), the second for both (until 2 ms).
  Program a, b;
  a.steps = {Step::store(1e6), Step::wait_drain(0)};
  b.steps = {Step::compute(5000), Step::store(1e6), Step::wait_drain(0), Step::compute(1)};
  const SimResult r = simulate(slow_stage(), {a, b});
  EXPECT_NEAR(r.total_ns, 2e6 + 1, 5.0);
  EXPECT_NEAR(r.drain_wait_ns, (1e6 - 1000) + (2e6 - 6000), 10.0);
}

TEST(RankAgreement, CountsPairsAndTies) {
  const RankAgreement same = rank_agreement({1, 2, 3, 4}, {10, 20, 30, 40});
  EXPECT_DOUBLE_EQ(same.spearman, 1.0);
  EXPECT_EQ(same.pairs, 6);
  EXPECT_DOUBLE_EQ(same.agreed, 6);
  const RankAgreement reversed = rank_agreement({1, 2, 3}, {3, 2, 1});
  EXPECT_DOUBLE_EQ(reversed.spearman, -1.0);
  EXPECT_DOUBLE_EQ(reversed.agreed, 0);
  // A predicted tie counts half; pairs measured within `tie` are not resolved.
  const RankAgreement tied = rank_agreement({0.010, 0.011, 0.05}, {0.02, 0.02, 0.03}, 0.005);
  EXPECT_EQ(tied.pairs, 3);
  EXPECT_DOUBLE_EQ(tied.agreed, 2.5);
  EXPECT_EQ(tied.resolved_pairs, 2);
  EXPECT_DOUBLE_EQ(tied.resolved_agreed, 2);
  EXPECT_TRUE(std::isnan(rank_agreement({1}, {1}).spearman));
  EXPECT_THROW(rank_agreement({1, 2}, {1}), Error);
}

TEST(OwnCost, InterpolatesInLogSAndHoldsTheEnds) {
  OwnCost oc;
  oc.add("paced", 4096, 0.04);
  oc.add("paced", 16384, 0.02);
  EXPECT_DOUBLE_EQ(oc.at("paced", 4096), 0.04);
  EXPECT_NEAR(oc.at("paced", 8192), 0.03, 1e-12);
  EXPECT_DOUBLE_EQ(oc.at("paced", 1024), 0.04);
  EXPECT_DOUBLE_EQ(oc.at("paced", 1 << 20), 0.02);
  EXPECT_DOUBLE_EQ(oc.at("bulk", 4096), 0.0);
  EXPECT_THROW(oc.add("paced", 0, 0.1), Error);
}

TEST(BulkDrainRatio, FromProbeRunRows) {
  const std::string csv =
      "# probe\n"
      "transport,store,gap_kind,K,V_bytes,gap_ns,stat,sustained_Bps\n"
      "host,v4,spin,132,4096,0,run,50e9\n"
      "host,bulk,spin,132,4096,0,run,35e9\n"
      "host,v4,spin,132,4096,100,run,50e9\n"
      "host,bulk,spin,132,4096,100,run,40e9\n"
      "host,bulk,spin,132,8192,0,run,1e9\n"      // no v4 twin: left out
      "host,bulk,spin,132,4096,0,mean,1e9\n";    // not a run row
  EXPECT_NEAR(bulk_drain_ratio_from_probe(csv, "t.csv"), 0.75, 1e-12);
  EXPECT_THROW(bulk_drain_ratio_from_probe("store,stat\nbulk,run\n", "x.csv"), Error);
  EXPECT_THROW(bulk_drain_ratio_from_probe("transport,store,gap_kind,K,V_bytes,gap_ns,stat,sustained_Bps\n", "e.csv"),
               Error);
}

TEST(StorePaths, ScheduleNamesAndErrors) {
  EXPECT_TRUE(store_path_schedule("paced-bulk").sliced);
  EXPECT_TRUE(store_path_schedule("paced-bulk").bulk_copies);
  EXPECT_FALSE(store_path_schedule("vector16").sliced);
  EXPECT_THROW(store_path_schedule("vector8"), Error);
  for (const std::string& p : modelled_store_paths()) EXPECT_NO_THROW(store_path_schedule(p));
}

TEST(StorePaths, HostPathRanksWholeTilesBelowSlices) {
  // S = 16384 on the host profile (attention-only 5.2 ms): whole-tile bursts
  // hold the next tile's loads, slices do not; bulk copies drain slower.
  const Profile& host = *find_embedded_profile("h200-host-pcie");
  const Profile& local = *find_embedded_profile("h200-local");
  const StorePathKernel k = host_kernel(16384, 5200);
  StorePathOptions opt;
  opt.bulk_drain_ratio = 0.75;
  const double v16 = predict_store_path(host, k, "vector16", opt, &local).residual;
  const double bulk = predict_store_path(host, k, "bulk", opt, &local).residual;
  const double paced = predict_store_path(host, k, "paced", opt, &local).residual;
  const double pbulk = predict_store_path(host, k, "paced-bulk", opt, &local).residual;
  EXPECT_LT(paced, v16);
  EXPECT_LT(v16, bulk);
  EXPECT_LE(paced, pbulk + 1e-9);
  // Without the load coupling a whole tile costs no more than the path-blind model.
  StorePathOptions free_loads = opt;
  free_loads.load_coupling = false;
  const double blind = predict_ulysses(host, k.kernel, &local).fused_us / 5200 - 1;
  EXPECT_NEAR(predict_store_path(host, k, "vector16", free_loads, &local).residual, blind, 0.002);
  EXPECT_EQ(predict_store_path(host, k, "paced", opt, &local).slices, 8);
}

TEST(StorePaths, FastStageCostsLittle) {
  // The device path drains at TB/s: at 16k every path is within a point of attention-only.
  const Profile& local = *find_embedded_profile("h200-local");
  const StorePathKernel k = host_kernel(16384, 5300);
  for (const std::string& p : modelled_store_paths())
    EXPECT_LT(predict_store_path(local, k, p, {}, &local).residual, 0.01) << p;
}

TEST(StorePaths, BadInputIsAnError) {
  const Profile& host = *find_embedded_profile("h200-host-pcie");
  StorePathKernel k = host_kernel(4096, 300);
  StorePathOptions bad;
  bad.bulk_drain_ratio = 0;
  EXPECT_THROW(predict_store_path(host, k, "bulk", bad), Error);
  k.kv_steps = 0;
  EXPECT_THROW(predict_store_path(host, k, "paced"), Error);
  EXPECT_THROW(wgmma_store_path_kernel(k.kernel, 0, 128), Error);
}
