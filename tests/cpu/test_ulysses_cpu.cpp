// The CPU side of the fused Ulysses attention: tile orders, the model's
// prediction, and `xstage ulysses`'s argument checks (before any GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "device/ulysses/params.hpp"
#include "harness/core/paired_schedule.hpp"
#include "harness/core/paired_stats.hpp"
#include "harness/ulysses/ulysses_bench.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/model/model.hpp"
#include "xstage/model/profile.hpp"
#include "xstage/ulysses/ulysses.hpp"
#include "xstage/ulysses/ulysses_prediction.hpp"

using namespace xstage;

namespace {

bool is_permutation_of_iota(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != int(i)) return false;
  return true;
}

TEST(UlyssesTileOrder, LinearIsTheIdentity) {
  const UlyssesLayout l({1, 1000, 8, 128, 8, 2});
  const auto o = ulysses_tile_order(l, 128, TileOrder::linear, 3);
  ASSERT_EQ(o.size(), 8u);  // ceil(1000 / 128)
  for (size_t i = 0; i < o.size(); ++i) EXPECT_EQ(o[i], int(i));
}

TEST(UlyssesTileOrder, RotatedIsAPermutationThatInterleavesDestinations) {
  const int P = 8, per = 3;  // every rank owns exactly 3 m-blocks
  const UlyssesLayout l({1, int64_t(P) * per * 128, 16, 128, P, 2});
  for (int src = 0; src < P; ++src) {
    const auto o = ulysses_tile_order(l, 128, TileOrder::rotated, src);
    ASSERT_EQ(o.size(), size_t(P * per));
    EXPECT_TRUE(is_permutation_of_iota(o)) << "src " << src;
    // One tile for each destination in turn, starting at src + 1.
    for (int i = 0; i < P * per; ++i) EXPECT_EQ(l.seq_owner(int64_t(o[i]) * 128), (src + 1 + i) % P) << i;
  }
  // At any position, different sources target different destinations (no incast).
  for (int i = 0; i < P * per; ++i) {
    std::set<int> dst;
    for (int src = 0; src < P; ++src)
      dst.insert(l.seq_owner(int64_t(ulysses_tile_order(l, 128, TileOrder::rotated, src)[i]) * 128));
    EXPECT_EQ(dst.size(), size_t(P)) << i;
  }
}

TEST(UlyssesTileOrder, UnevenShardsAndEmptyRanksStillGiveAPermutation) {
  for (int64_t S : {1, 5, 127, 129, 1000, 4097}) {
    const UlyssesLayout l({2, S, 8, 64, 8, 2});
    for (int src : {0, 5, 7}) {
      const auto o = ulysses_tile_order(l, 128, TileOrder::rotated, src);
      EXPECT_EQ(o.size(), size_t((S + 127) / 128)) << S;
      EXPECT_TRUE(is_permutation_of_iota(o)) << "S " << S << " src " << src;
    }
  }
}

// The writer's flags (one per destination a tile touches) and the receiver's
// waits (every m-block overlapping its rows) must be the same set, or a
// receiver waits forever or reads rows before they land.
TEST(UlyssesFlags, WritersAndReceiversAgreeOnEveryTile) {
  using namespace xstage::ulysses;
  for (int P : {1, 2, 3, 8})
    for (int64_t S : {1, 5, 127, 128, 129, 333, 1000, 1024, 4097})
      for (int block_m : {64, 128}) {
        const int64_t chunk = (S + P - 1) / P;
        const int M = int((S + block_m - 1) / block_m);
        for (int mb = 0; mb < M; ++mb) {
          const RankRange w = ulysses_tile_destinations(int64_t(mb) * block_m, block_m, S, chunk);
          for (int d = 0; d < P; ++d) {
            const RankRange r = ulysses_receiver_m_blocks(d, block_m, S, chunk);
            const bool writes = d >= w.first && d <= w.last;
            const bool waits = mb >= r.first && mb <= r.last;
            EXPECT_EQ(writes, waits) << "P " << P << " S " << S << " block_m " << block_m << " m-block " << mb
                                     << " rank " << d;
          }
        }
      }
}

// Destination d's flag array (ulysses_flag_index): the tiles that write to d
// take distinct slots inside [0, streams x stride), and they are exactly the
// slots a receiver waits on (slot j of a stream while j < its m-block span).
TEST(UlyssesFlags, EachDestinationsSlotsAreTheTilesItWaitsFor) {
  using namespace xstage::ulysses;
  for (int P : {1, 2, 3, 8})
    for (int64_t S : {1, 5, 127, 128, 129, 333, 1000, 4097})
      for (int block_m : {64, 128, 192}) {
        const int64_t chunk = (S + P - 1) / P;
        const int stride = ulysses_flag_stride(chunk, block_m);
        const int M = int((S + block_m - 1) / block_m), batch = 2, hpr = 3;
        const int64_t slots = int64_t(P) * batch * hpr * stride;
        for (int d = 0; d < P; ++d) {
          std::set<int64_t> written;
          for (int src = 0; src < P; ++src)
            for (int b = 0; b < batch; ++b)
              for (int h = 0; h < hpr; ++h)
                for (int mb = 0; mb < M; ++mb) {
                  const RankRange w = ulysses_tile_destinations(int64_t(mb) * block_m, block_m, S, chunk);
                  if (d < w.first || d > w.last) continue;
                  const int64_t i =
                      ulysses_flag_index(ulysses_stream_index(src, b, h, batch, hpr), mb, d, block_m, chunk, stride);
                  ASSERT_TRUE(i >= 0 && i < slots) << "P " << P << " S " << S << " rank " << d << " slot " << i;
                  EXPECT_TRUE(written.insert(i).second) << "P " << P << " S " << S << " rank " << d << " slot " << i;
                }
          const RankRange r = ulysses_receiver_m_blocks(d, block_m, S, chunk);
          std::set<int64_t> waited;
          for (int64_t k = 0; k < slots; ++k)
            if (k % stride <= r.last - r.first) waited.insert(k);
          EXPECT_EQ(written, waited) << "P " << P << " S " << S << " block_m " << block_m << " rank " << d;
        }
      }
}

TEST(UlyssesFlags, RanksWithoutRowsWaitForNothing) {
  // S = 5 over P = 4: chunk 2, rank 3 owns no rows.
  const auto r = xstage::ulysses::ulysses_receiver_m_blocks(3, 128, 5, 2);
  EXPECT_LT(r.last, r.first);
}

Profile stage(double R, double Q) {
  Profile p;
  p.name = "test";
  p.transport = "test";
  p.status = "nominal";
  p.t0 = {100, 50e9, 2e12};
  p.R_Bps = R;
  p.Q_bytes = Q;
  return p;
}

TEST(UlyssesPrediction, NoPayloadCostsNothing) {
  const auto pr = predict_ulysses(stage(50e9, 8e6), {1000, 132, 0.0, 800.0});
  EXPECT_NEAR(pr.fused_us, 800.0, 1e-6);
  EXPECT_NEAR(pr.residual_us, 0.0, 1e-6);
  EXPECT_NEAR(pr.sequential_us, 800.0, 1e-6);
}

TEST(UlyssesPrediction, DrainBoundWhenThePayloadOutlastsTheCompute) {
  // 100 MB at 50 GB/s = 2000 us against 100 us of compute: the drain sets the time.
  const auto pr = predict_ulysses(stage(50e9, 1e6), {1320, 132, 100e6, 100.0});
  EXPECT_NEAR(pr.fused_us, 2000.0, 2000.0 * 0.02);
  EXPECT_NEAR(pr.sequential_us, 2100.0, 1e-6);
  EXPECT_GT(pr.stalled_us, 0.0);
}

TEST(UlyssesPrediction, ComputeBoundLeavesTheLastWavesDrain) {
  // 10 waves of 132 tiles, 1 ms each; 1 MB per wave at 50 GB/s drains in 20 us
  // behind each wave, so only the last wave's drain shows: residual ~20 us.
  const auto pr = predict_ulysses(stage(50e9, 64e6), {1320, 132, 10e6, 10000.0});
  EXPECT_GT(pr.residual_us, 15.0);
  EXPECT_LT(pr.residual_us, 25.0);
  EXPECT_NEAR(pr.sequential_us, 10000.0 + 200.0, 1e-6);
}

TEST(UlyssesPrediction, ReceiversLearnOfTheLastByteFromAFlagAfterAFence) {
  // Fused: the writer's fence (one latency after the drain), then its flag
  // (one more). Sequential: the all-to-all's last stores complete (one).
  Profile slow = stage(50e9, 64e6);
  slow.latency_ns = 2000;
  const UlyssesKernelShape shape{1320, 132, 10e6, 10000.0};
  const auto base = predict_ulysses(stage(50e9, 64e6), shape), late = predict_ulysses(slow, shape);
  EXPECT_NEAR(late.fused_us - base.fused_us, 4.0, 1e-6);
  EXPECT_NEAR(late.residual_us - base.residual_us, 4.0, 1e-6);
  EXPECT_NEAR(late.sequential_us - base.sequential_us, 2.0, 1e-6);
}

// The T0 the attention-only time contains, per tile of a wave of `shape`.
double wave_t0_ns(const Profile& p, const UlyssesKernelShape& shape) {
  const double tile_bytes = shape.payload_bytes / double(shape.tiles);
  return t0_iss_ns(p, shape.concurrent_tiles, tile_bytes * shape.concurrent_tiles);
}

TEST(UlyssesPrediction, TakesTheLocalStoresT0OutOfEachTile) {
  // Compute-bound (10 waves of 1 ms; the stage never fills): a local store
  // with a smaller T0 leaves more of the attention-only time to compute, so
  // each wave, and the run, grows by the difference of the two T0s.
  Profile remote = stage(50e9, 64e6);
  remote.t0.fixed_ns = 2000;
  const Profile local = stage(50e9, 64e6);  // fixed 100 ns
  const UlyssesKernelShape shape{1320, 132, 10e6, 10000.0};
  const double dt0_ns = wave_t0_ns(remote, shape) - wave_t0_ns(local, shape);
  ASSERT_NEAR(dt0_ns, 1900.0, 1e-6);
  const auto old = predict_ulysses(remote, shape), own = predict_ulysses(remote, shape, &local);
  EXPECT_NEAR(own.fused_us - old.fused_us, 10 * dt0_ns * 1e-3, 1e-3);
  EXPECT_NEAR(own.residual_us - old.residual_us, 10 * dt0_ns * 1e-3, 1e-3);
  // The sequential variant and the stores themselves go through the profiled path alone.
  EXPECT_DOUBLE_EQ(own.sequential_us, old.sequential_us);
  EXPECT_NEAR(own.stalled_us, old.stalled_us, 1e-6);
}

TEST(UlyssesPrediction, EmbeddedLocalT0IsBelowTheHostPathsAndRaisesItsPrediction) {
  const Profile& host = *find_embedded_profile("h200-host-pcie");
  const Profile& local = *find_embedded_profile("h200-local");
  // Compute-bound on the host path: 1 MB a wave drains in ~20 us behind 1 ms of compute.
  const UlyssesKernelShape shape{1320, 132, 10e6, 10000.0};
  const double dt0_ns = wave_t0_ns(host, shape) - wave_t0_ns(local, shape);
  ASSERT_GT(dt0_ns, 0.0);
  const auto old = predict_ulysses(host, shape), own = predict_ulysses(host, shape, &local);
  EXPECT_NEAR(own.fused_us - old.fused_us, 10 * dt0_ns * 1e-3, 1e-3);
}

TEST(UlyssesPrediction, TheSameProfileAsLocalGivesTheOldResult) {
  // Device placement: the attention-only run stores into the profiled path itself.
  const Profile& host = *find_embedded_profile("h200-host-pcie");
  const Profile copy = host;
  for (const UlyssesKernelShape& shape : {UlyssesKernelShape{1320, 132, 100e6, 100.0},
                                          UlyssesKernelShape{1320, 132, 10e6, 10000.0},
                                          UlyssesKernelShape{768, 132, 25165824.0, 300.0}})
    for (const Profile* same : {&host, &copy}) {
      const auto old = predict_ulysses(host, shape), own = predict_ulysses(host, shape, same);
      EXPECT_EQ(own.fused_us, old.fused_us) << shape.tiles << " " << shape.payload_bytes;
      EXPECT_EQ(own.residual_us, old.residual_us);
      EXPECT_EQ(own.sequential_us, old.sequential_us);
      EXPECT_EQ(own.stalled_us, old.stalled_us);
    }
}

TEST(UlyssesPrediction, RejectsEmptyShapes) {
  EXPECT_THROW(predict_ulysses(stage(50e9, 1e6), {0, 132, 1e6, 10.0}), Error);
  EXPECT_THROW(predict_ulysses(stage(50e9, 1e6), {10, 0, 1e6, 10.0}), Error);
  EXPECT_THROW(predict_ulysses(stage(50e9, 1e6), {10, 132, 1e6, 0.0}), Error);
}

void expect_error(const std::string& args, const std::string& fragment) {
  const CliRun r = run_cli(args);
  EXPECT_NE(r.rc, 0) << args << "\n" << r.out;
  EXPECT_NE(r.out.find(fragment), std::string::npos) << args << "\n" << r.out;
  EXPECT_EQ(r.out.find("internal error"), std::string::npos) << args << "\n" << r.out;
}

TEST(UlyssesCli, RejectsBadArgumentsBeforeLookingForAGpu) {
  expect_error("ulysses --heads 25", "--heads 25 does not split over 8 ranks");
  expect_error("ulysses --seq 0", "--seq: expected lengths >= 1, got 0");
  expect_error("ulysses --sweep --seq 4096", "--sweep and --seq: both given; expected one of them");
  expect_error("ulysses --head-dim 96", "--head-dim: expected 64 or 128, got 96");
  expect_error("ulysses --variants fast",
               "variant 'fast': expected attention-only, sequential, pipelined, fused or coupled");
  expect_error("ulysses --chunks 0", "--chunks: expected head chunks >= 1, got 0");
  // 24 heads over the 8 emulated ranks: 3 heads a rank.
  expect_error("ulysses --chunks 2,4", "--chunks 4: a rank holds 3 heads (H / P = 24 / 8); expected 1 .. 3 chunks");
  expect_error("ulysses --chunks 2 --variants attention-only,fused",
               "--chunks, --row-chunks: the chunks of the pipelined variant, which --variants leaves out");
  expect_error("ulysses --row-chunks 0", "--row-chunks: expected row chunks 1 .. 256, got 0");
  expect_error("ulysses --chunks 3 --row-chunks 100", "--chunks 3 x --row-chunks 100: expected at most 256 chunks");
  expect_error("ulysses --pipeline-graph maybe", "--pipeline-graph");
  expect_error("ulysses --stores dma", "store path 'dma': expected vector16");
  expect_error("ulysses --orders random", "tile order 'random': expected linear or rotated");
  expect_error("ulysses --flags late", "flag timing 'late': expected lagged, eager, at-exit or coupled");
  expect_error("ulysses --flags coupled", "expected lagged, eager or at-exit (coupled completion is --variants");
  expect_error("ulysses --a2a nccl", "--a2a nccl: NCCL's all-to-all needs --backend nccl");
  expect_error("ulysses --backend nccl --placement host", "--placement host");
  expect_error("ulysses --timeout 0", "--timeout: expected a positive time");
  expect_error("ulysses --profile /nonexistent/profile.json", "/nonexistent/profile.json");
  expect_error("ulysses --local-profile /nonexistent/local.json", "--local-profile: profile '/nonexistent/local.json'");
  expect_error("ulysses --ranks 0", "--ranks: expected a whole number >= 1, got 0");
  expect_error("ulysses --kernel wgmma-n192", "--kernel wgmma-n192: not a kernel of the fused attention; expected mma or wgmma");
  expect_error("ulysses --kernel tensor", "attention kernel: expected auto, mma, wgmma");
  expect_error("ulysses --paced-rows 0", "--paced-rows: expected rows >= 1, got 0");
  expect_error("ulysses --stores vector16-wt", "store path vector16-wt runs on the mma attention kernel only");
  expect_error("ulysses --stores paced-bulk --variants coupled", "has no coupled form");
  expect_error("ulysses --stores paced --variants attention-only,sequential", "no fused or coupled variant asked for");
  expect_error("ulysses --stores paced-bulk --kernel mma", "the mma kernel has none");
  expect_error("ulysses --stores paced-bulk --flags lagged,eager", "publishes its flags at exit only, not eager");
}

TEST(UlyssesCombinations, EachStorePathRunsWhereItsKernelAndFlagsAllowIt) {
  const auto ok = [](StorePath s, UlyssesVariant v, Completion f, AttentionKernel k) {
    return !ulysses_combination_error(s, v, f, k).has_value();
  };
  const auto fused = UlyssesVariant::fused, coupled = UlyssesVariant::coupled;
  const auto wgmma = AttentionKernel::wgmma_pingpong, mma = AttentionKernel::mma_sync;
  for (Completion f : {Completion::lagged, Completion::eager, Completion::at_exit})
    for (AttentionKernel k : {wgmma, mma}) {
      EXPECT_TRUE(ok(StorePath::vector16, fused, f, k));
      EXPECT_TRUE(ok(StorePath::bulk, fused, f, k));
      EXPECT_EQ(ok(StorePath::vector16_wt, fused, f, k), k == mma);
      EXPECT_EQ(ok(StorePath::paced, fused, f, k), f != Completion::eager);
      EXPECT_EQ(ok(StorePath::paced_bulk, fused, f, k), k == wgmma && f == Completion::at_exit);
      EXPECT_EQ(ok(StorePath::paced_warp, fused, f, k), k == wgmma && f == Completion::at_exit);
      EXPECT_FALSE(ok(StorePath::paced_warp, coupled, f, k));
      EXPECT_TRUE(ok(StorePath::vector16, coupled, f, k));
      EXPECT_FALSE(ok(StorePath::paced, coupled, f, k));
      EXPECT_FALSE(ok(StorePath::paced_bulk, coupled, f, k));
    }
  EXPECT_EQ(parse_store_path("paced-bulk"), StorePath::paced_bulk);
  EXPECT_EQ(parse_store_path("paced-warp"), StorePath::paced_warp);
  EXPECT_TRUE(is_paced(StorePath::paced_warp));
  EXPECT_TRUE(is_paced(StorePath::paced_bulk));
  EXPECT_FALSE(is_paced(StorePath::bulk));
}

TEST(UlyssesCli, WithoutAGpuSaysSoOnOneLine) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present";
  const CliRun r = run_cli("ulysses --seq 4096");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("ulysses: no CUDA GPU visible"), std::string::npos) << r.out;
}

TEST(UlyssesCli, RefusesAnUnknownPairingBeforeLookingForAGpu) {
  const CliRun r = run_cli("ulysses --seq 4096 --pairing sideways");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--pairing: expected adjacent or settled, got 'sideways'"), std::string::npos) << r.out;
}

}  // namespace

TEST(UlyssesKernelShape, CountsTilesAndPayloadAsTheKernelRunsThem) {
  const UlyssesShape s{1, 1000, 8, 128, 4, 2};  // chunk 250: rank 0 owns rows 0..249
  const auto em = ulysses_kernel_shape(s, true, 0, 128, 132, 10.0);
  EXPECT_EQ(em.tiles, 4 * 1 * 2 * 8);  // 4 ranks x B x 2 heads x ceil(1000 / 128)
  EXPECT_DOUBLE_EQ(em.payload_bytes, 1000.0 * 8 * 128 * 2);
  const auto one = ulysses_kernel_shape(s, false, 0, 128, 132, 10.0);
  EXPECT_EQ(one.tiles, 2 * 8);
  EXPECT_DOUBLE_EQ(one.payload_bytes, 1000.0 * 2 * 128 * 2 * 750 / 1000);  // the rows ranks 1..3 own
  EXPECT_THROW(ulysses_kernel_shape(s, false, 4, 128, 132, 10.0), Error);
  EXPECT_THROW(ulysses_kernel_shape(s, true, 0, 0, 132, 10.0), Error);
}

TEST(UlyssesBenchSummary, ResidualIsTheMedianPairedRatioWhereThereAreRounds) {
  UlyssesBenchSummary s;
  s.attention_only_us = 100, s.fused_us = 130, s.coupled_us = 150;
  EXPECT_DOUBLE_EQ(s.residual(), 0.30);  // no rounds: from the medians
  EXPECT_DOUBLE_EQ(s.coupled_residual(), 0.50);
  // A GPU that slowed down in round 2 slowed both variants of that round: the
  // paired ratios stay near 5% though the medians would say 30%.
  s.residual_fused_rounds = {0.04, 0.05, 0.30};
  s.residual_coupled_rounds = {0.09, 0.07, 0.08, 0.50};
  EXPECT_DOUBLE_EQ(s.residual(), 0.05);
  EXPECT_DOUBLE_EQ(s.coupled_residual(), 0.09);  // the upper median of an even count, as the times
}

TEST(UlyssesBenchSummary, PipelinedAndTheFloorBesideFusedAndSequential) {
  UlyssesBenchSummary s;
  s.attention_only_us = 100, s.sequential_us = 200, s.pipelined_us = 150, s.fused_us = 120, s.floor_us = 110;
  EXPECT_DOUBLE_EQ(s.speedup(), 200.0 / 120);
  EXPECT_DOUBLE_EQ(s.speedup_over_pipelined(), 150.0 / 120);
  EXPECT_DOUBLE_EQ(s.pipelined_residual(), 0.5);  // no rounds: from the medians
  s.residual_pipelined_rounds = {0.45, 0.40, 0.90};
  EXPECT_DOUBLE_EQ(s.pipelined_residual(), 0.45);
  EXPECT_DOUBLE_EQ(s.fused_over_floor(), 120.0 / 110 - 1);
  s.residual_fused_rounds = {0.15, 0.12, 0.13};  // paired: 13% over attention-only, the floor 10% over it
  EXPECT_DOUBLE_EQ(s.fused_over_floor_paired(), 1.13 / 1.1 - 1);
}

TEST(UlyssesFloor, TheProbedPathIsWhereTheOutputsLive) {
  EXPECT_EQ(ulysses_floor_transport(Backend::emulated, Placement::host), Transport::host);
  EXPECT_EQ(ulysses_floor_transport(Backend::emulated, Placement::device), Transport::local);
  EXPECT_EQ(ulysses_floor_transport(Backend::peer, Placement::device), Transport::peer);
  EXPECT_EQ(ulysses_floor_transport(Backend::peer, Placement::host), Transport::host);
  EXPECT_EQ(ulysses_floor_transport(Backend::nccl, Placement::device), Transport::peer);
}

TEST(UlyssesPredictCli, TakesTheReportsOwnPairedResidual) {
  const std::string path = ::testing::TempDir() + "/ulysses_report_paired.json";
  std::ofstream(path) << R"({"block_m": 128, "concurrent_tiles": 132, "profile": "h200-host-pcie",
    "rows": [{"P": 8, "B": 1, "H": 24, "D": 128, "backend": "emulated"}],
    "summary": [{"S": 4096, "attention_only_us": 300.0, "fused_us": 550.0, "residual_fused": 0.75}]})";
  const CliRun r = run_cli("ulysses-predict " + path + " --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_DOUBLE_EQ(j["rows"][0]["residual"].get<double>(), 0.75) << r.out;
}

TEST(UlyssesPredictCli, RepredictsARecordedReportWithAnyProfile) {
  const std::string path = ::testing::TempDir() + "/ulysses_report.json";
  std::ofstream(path) << R"({"block_m": 128, "concurrent_tiles": 132, "profile": "h200-host-pcie",
    "rows": [{"P": 8, "B": 1, "H": 24, "D": 128, "backend": "emulated"}],
    "summary": [{"S": 4096, "attention_only_us": 300.0, "fused_us": 550.0, "sequential_us": 800.0},
                {"S": 8192, "attention_only_us": 0.0}]})";
  const CliRun r = run_cli("ulysses-predict " + path + " --profile h200-host-pcie --profile h200-local --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  ASSERT_EQ(j["rows"].size(), 2u) << r.out;  // S = 8192 has no attention-only time: skipped
  const auto& host = j["rows"][0];
  const auto& local = j["rows"][1];
  EXPECT_NEAR(host["residual"].get<double>(), 550.0 / 300.0 - 1, 1e-12);
  // 25 MB through PCIe at ~51 GB/s takes ~0.5 ms: drain-bound, far above 0.3 ms of attention.
  EXPECT_GT(host["predicted_fused_us"].get<double>(), 450.0);
  // Through local memory at ~4 TB/s it hides.
  EXPECT_LT(local["predicted_residual"].get<double>(), 0.1);
  // Each row names the local profile whose T0 it took out of the tiles (by default the GPU's own memory).
  EXPECT_EQ(host["local_profile"], "h200-local") << r.out;
  EXPECT_EQ(local["local_profile"], "h200-local") << r.out;
  const CliRun bad = run_cli("ulysses-predict /nonexistent/report.json");
  EXPECT_EQ(bad.rc, 2) << bad.out;
  EXPECT_NE(bad.out.find("/nonexistent/report.json: cannot open"), std::string::npos) << bad.out;
  std::ofstream(path) << R"({"rows": [], "summary": []})";
  const CliRun empty = run_cli("ulysses-predict " + path);
  EXPECT_EQ(empty.rc, 2) << empty.out;
  EXPECT_NE(empty.out.find("expected non-empty \"rows\""), std::string::npos) << empty.out;
}

TEST(UlyssesPredictCli, LocalProfileSetsTheT0TakenOutOfEachTile) {
  // 24 waves of 1 ms on the host path: compute-bound, so the local T0 shows.
  const std::string path = ::testing::TempDir() + "/ulysses_report_local.json";
  std::ofstream(path) << R"({"block_m": 128, "concurrent_tiles": 132, "profile": "h200-host-pcie",
    "rows": [{"P": 8, "B": 1, "H": 24, "D": 128, "backend": "emulated"}],
    "summary": [{"S": 16384, "attention_only_us": 24000.0}]})";
  auto predicted = [&](const std::string& extra) {
    const CliRun r = run_cli("ulysses-predict " + path + " --json" + extra);
    EXPECT_EQ(r.rc, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
    return j["rows"][0];
  };
  const auto by_default = predicted(""), as_remote = predicted(" --local-profile h200-host-pcie");
  EXPECT_EQ(by_default["local_profile"], "h200-local");
  EXPECT_EQ(as_remote["local_profile"], "h200-host-pcie");
  // With the host profile as the local one, the attention-only run stores through PCIe:
  // each of the 24 waves' compute is short by the host's T0 less the local one.
  const auto ks = ulysses_kernel_shape({1, 16384, 24, 128, 8, 2}, true, 0, 128, 132, 24000.0);
  ASSERT_EQ(ks.tiles, 3072);
  const double dt0_ns = wave_t0_ns(*find_embedded_profile("h200-host-pcie"), ks) -
                        wave_t0_ns(*find_embedded_profile("h200-local"), ks);
  EXPECT_NEAR(by_default["predicted_fused_us"].get<double>() - as_remote["predicted_fused_us"].get<double>(),
              24 * dt0_ns * 1e-3, 1e-3);
  EXPECT_DOUBLE_EQ(as_remote["predicted_fused_us"].get<double>(),
                   predict_ulysses(*find_embedded_profile("h200-host-pcie"), ks).fused_us);
  const CliRun bad = run_cli("ulysses-predict " + path + " --local-profile /nonexistent/local.json");
  EXPECT_EQ(bad.rc, 2) << bad.out;
  EXPECT_NE(bad.out.find("--local-profile: profile '/nonexistent/local.json'"), std::string::npos) << bad.out;
}

// Every run of a body but `base` follows `lead` runs of base (1 adjacent, 2
// settled); each other body runs once a round; one body alone: base once a round.
static void expect_paired_schedule(const std::vector<size_t>& who, size_t n, size_t base, int rounds, size_t lead) {
  ASSERT_EQ(who.size(), n == 1 ? size_t(rounds) : (lead + 1) * (n - 1) * rounds) << n << " " << base;
  std::vector<int> runs(n, 0);
  for (size_t i = 0; i < who.size(); ++i) {
    ASSERT_LT(who[i], n);
    ++runs[who[i]];
    if (who[i] != base) {
      ASSERT_GE(i, lead);
      for (size_t k = 1; k <= lead; ++k) EXPECT_EQ(who[i - k], base) << "run " << i << " of n = " << n;
    }
  }
  for (size_t b = 0; b < n; ++b)
    EXPECT_EQ(runs[b], b == base ? (n == 1 ? rounds : int(lead * (n - 1)) * rounds) : rounds) << b;
}

TEST(PairedTiming, EveryOtherRunFollowsARunOfTheBaseAndEachRunsOnceARound) {
  for (size_t n : {1u, 2u, 5u})
    for (size_t base : {size_t(0), n - 1}) {
      const int rounds = 4;
      const auto who = xstage::paired_schedule(n, base, rounds);
      expect_paired_schedule(who, n, base, rounds, 1);
      // The rounds start one body further along each time.
      if (n > 2) EXPECT_NE(who[1], who[2 * (n - 1) + 1]);
    }
}

TEST(PairedTiming, SettledPairsFollowARunOfTheBaseBothOfThem) {
  for (size_t n : {1u, 2u, 5u})
    for (size_t base : {size_t(0), n - 1}) {
      const int rounds = 3;
      const auto who = xstage::paired_schedule(n, base, rounds, /*settled=*/true);
      expect_paired_schedule(who, n, base, rounds, 2);
      // The same configurations in the same order as adjacent pairs.
      std::vector<size_t> settled_others, adjacent_others;
      for (size_t x : who)
        if (x != base) settled_others.push_back(x);
      for (size_t x : xstage::paired_schedule(n, base, rounds))
        if (x != base) adjacent_others.push_back(x);
      EXPECT_EQ(settled_others, adjacent_others);
    }
}

TEST(UlyssesFlags, SlotArithmeticHoldsAtTheLongestSequence) {
  // S = 2^31 - 1 (the host's limit) over P = 8: d * chunk near 2^31, in 32 bits.
  const int64_t S = (int64_t(1) << 31) - 1, P = 8, chunk = (S + P - 1) / P;
  const int block_m = 128, stride = xstage::ulysses::ulysses_flag_stride(chunk, block_m);
  for (int d = 0; d < P; ++d) {
    const int first = int(int64_t(d) * chunk / block_m);
    const int m_block = int(std::min(S - 1, int64_t(d) * chunk + chunk - 1) / block_m);  // d's last m-block
    EXPECT_EQ(xstage::ulysses::ulysses_flag_index(3, first, d, block_m, chunk, stride), 3 * int64_t(stride)) << d;
    EXPECT_EQ(xstage::ulysses::ulysses_flag_index(3, m_block, d, block_m, chunk, stride),
              3 * int64_t(stride) + (m_block - first))
        << d;
    EXPECT_LT(m_block - first, stride) << d;
  }
}

TEST(PairedTiming, ResidualsAreEachRunOverTheBaseRunBeforeIt) {
  const auto rel = xstage::paired_residuals({110, 99, 120}, {100, 90, 100});
  ASSERT_EQ(rel.size(), 3u);
  EXPECT_NEAR(rel[0], 0.10, 1e-12);
  EXPECT_NEAR(rel[1], 0.10, 1e-12);
  EXPECT_NEAR(rel[2], 0.20, 1e-12);
  EXPECT_DOUBLE_EQ(xstage::median_value(rel), rel[0]);
  EXPECT_DOUBLE_EQ(xstage::median_value({4, 1, 3, 2}), 3.0);  // the upper one of an even count
  EXPECT_THROW(xstage::paired_residuals({1, 2}, {1}), std::logic_error);
  EXPECT_THROW(xstage::median_value({}), std::logic_error);
}

TEST(PairedTiming, TheBestConfigurationIsTheOneOfLeastKeyNotTheFirstOrFastest) {
  // Row 1 has the least median time, row 2 the least paired residual (f16).
  const std::vector<double> time_us{5430, 5329, 5440}, residual{0.030, 0.044, 0.027};
  const std::vector<size_t> rows{0, 1, 2};
  EXPECT_EQ(xstage::least_by(rows, [&](size_t i) { return residual[i]; }), std::optional<size_t>(2));
  EXPECT_EQ(xstage::least_by(rows, [&](size_t i) { return time_us[i]; }), std::optional<size_t>(1));
  EXPECT_EQ(xstage::least_by(std::vector<size_t>{2, 0}, [&](size_t) { return 1.0; }), std::optional<size_t>(2));
  EXPECT_FALSE(xstage::least_by(std::vector<size_t>{}, [&](size_t i) { return time_us[i]; }).has_value());
}

TEST(UlyssesStorePaths, TheDefaultIsARunnableCombinationOnEveryKernelAndVariant) {
  using namespace xstage;
  for (AttentionKernel k : {AttentionKernel::wgmma_pingpong, AttentionKernel::mma_sync})
    for (UlyssesVariant v : {UlyssesVariant::fused, UlyssesVariant::coupled})
      for (Completion f : {Completion::lagged, Completion::eager, Completion::at_exit}) {
        const StorePath s = default_store_path(k, v, f);
        EXPECT_FALSE(ulysses_combination_error(s, v, f, k).has_value()) << to_string(s) << " " << to_string(f);
      }
  // By measurement (docs/RESULTS.md section 4): the producer-sent 16-byte path where there is a producer.
  EXPECT_EQ(default_store_path(AttentionKernel::wgmma_pingpong, UlyssesVariant::fused), StorePath::paced_warp);
  EXPECT_EQ(default_store_path(AttentionKernel::mma_sync, UlyssesVariant::fused), StorePath::paced);
  EXPECT_FALSE(UlyssesRun{}.store.has_value());
}
