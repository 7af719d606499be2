// The expert-parallel MoE layer through its measurement (harness/moe/moe_layer_bench.hpp)
// and the command: every variant and schedule on poisoned outputs, each fused
// schedule bit for bit against the unfused baseline, sampled tokens of every
// rank (the last, a token whose k experts sit on one rank among them)
// against the fp64 CPU reference, each expert's rows against the routing.
// One GPU: emulated P = 2 and 4, host and device placement, small shapes and
// real ones at small T, uniform and Zipf routing, a routing with an expert
// that gets no token, T not a multiple of any tile, both tiles. Two GPUs:
// peer, and nccl through `xstage launch`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "gpu/need_gpus.hpp"
#include "harness/moe/moe_layer_bench.hpp"
#include "xstage/comm/world.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/moe/moe_layer.hpp"

using namespace xstage;
namespace fs = std::filesystem;

namespace {

MoeLayerBenchOptions layer_case(const std::string& shape, int P, Placement pl, std::vector<int> tokens,
                                MoeRouting routing = MoeRouting::uniform) {
  MoeLayerBenchOptions o;
  o.world = {Backend::emulated, P, pl, 0};
  o.shape = parse_moe_shape(shape);
  o.tokens = std::move(tokens);
  o.routing = routing;
  o.check = true;
  o.timeout_s = 20;
  return o;
}

std::string label(const MoeLayerBenchOptions& o) {
  return o.shape.name + " " + std::to_string(o.shape.hidden) + "/" + std::to_string(o.shape.inter) + "/" +
         std::to_string(o.shape.experts) + "/" + std::to_string(o.shape.topk) + " P=" +
         std::to_string(o.world.ranks) + " " + to_string(o.world.placement) + " " + to_string(o.routing) + " tile " +
         to_string(o.tile);
}

// Every configuration checked, bit-exact against unfused, every token count.
void expect_checked(const MoeLayerBenchOptions& o) {
  const MoeLayerBenchReport rep = run_moe_layer_bench(o);
  ASSERT_EQ(rep.configs.size(), o.tokens.size()) << label(o);
  for (const auto& c : rep.configs) {
    ASSERT_TRUE(c.check.has_value()) << label(o);
    EXPECT_TRUE(c.check->ok) << label(o) << " T=" << c.tokens << ": " << c.check->failure;
    EXPECT_EQ(c.check->unwritten, 0) << label(o) << " T=" << c.tokens;
    EXPECT_EQ(c.check->expert_rows_mismatch, 0) << label(o) << " T=" << c.tokens;
    ASSERT_TRUE(c.check->bit_exact_vs_unfused.has_value()) << label(o);
    EXPECT_TRUE(*c.check->bit_exact_vs_unfused) << label(o) << " T=" << c.tokens;
    EXPECT_LE(c.check->rel_err, 1e-2) << label(o) << " T=" << c.tokens;
    EXPECT_GE(c.check->tokens_checked, std::min<int64_t>(3, c.tokens)) << label(o);
    EXPECT_EQ(c.plans.size(), 3u) << label(o);  // every schedule ran
  }
}

}  // namespace

// After a wait of the run times out, nothing of it reaches an output. The
// dispatch's (hook test_counts_never_come: every source's counts arrive one
// run late): the fused kernel returns at once and publishes no done flag. The
// fused kernel's own (hook test_expert_wait_fails: its record set before it
// starts): it runs, but its last CTA publishes no done flag. Either way the
// combine's wait returns at once (this rank's own flag cannot come), the
// combine leaves the output as it was, and check_waits names the wait. The
// unfused baseline after the dispatch's: its GEMMs and copies run on the
// pool as it was, and its combine leaves the output as it was too.
TEST(MoeLayerEmulated, AfterAFailedWaitNothingIsWritten) {
  XSTAGE_NEED_GPUS(1);
  struct Case {
    bool dispatch_fails;
    MoeLayerVariant variant;
  };
  for (const Case c : {Case{true, MoeLayerVariant::fused}, Case{false, MoeLayerVariant::fused},
                       Case{true, MoeLayerVariant::unfused}})
    for (Placement pl : {Placement::device, Placement::host}) {
      const bool dispatch_fails = c.dispatch_fails;
      SCOPED_TRACE(std::string(dispatch_fails ? "dispatch wait, " : "expert kernel's wait, ") + to_string(pl) + ", " +
                   to_string(c.variant));
      auto world = World::create({Backend::emulated, 2, pl, 0});
      MoeLayerOptions lo;
      lo.shape = parse_moe_shape("512/256/8/2");
      lo.tokens_max = 40;
      lo.timeout_s = 0.2;
      lo.test_counts_never_come = dispatch_fails;
      lo.test_expert_wait_fails = !dispatch_fails;
      MoeLayer layer(*world, lo);
      const int k = lo.shape.topk, E = lo.shape.experts, H = lo.shape.hidden;
      std::vector<int32_t> ids(size_t(lo.tokens_max) * k);
      for (int t = 0; t < lo.tokens_max; ++t)
        for (int j = 0; j < k; ++j) ids[size_t(t) * k + j] = (t + 3 * j) % E;  // k distinct experts a token
      const std::vector<float> wts(ids.size(), 0.5f);
      for (int r = 0; r < 2; ++r) {
        ASSERT_EQ(cudaMemcpy(layer.topk_ids(r), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(layer.topk_weights(r), wts.data(), wts.size() * 4, cudaMemcpyHostToDevice),
                  cudaSuccess);
        layer.set_tokens(r, lo.tokens_max);
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the world's streams do not wait for the legacy stream
      layer.poison_outputs();
      MoeSchedulePlan plan;
      layer.run(c.variant, plan);
      const std::string want =
          dispatch_fails ? "dispatch wait timed out" : "the fused expert kernel of ranks 0 .. 1 timed out";
      try {
        layer.check_waits();
        ADD_FAILURE() << "check_waits did not report the failed wait";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      }
      for (int r = 0; r < 2; ++r) {
        std::vector<uint16_t> out(size_t(lo.tokens_max) * H);
        ASSERT_EQ(cudaMemcpy(out.data(), layer.output(r), out.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint16_t v) { return v == 0xFFFF; }))
            << "rank " << r << ": the combine wrote the output of a run whose wait failed";
      }
    }
}

TEST(MoeLayerEmulated, SmallShapeEveryScheduleP2AndP4BothPlacements) {
  XSTAGE_NEED_GPUS(1);
  for (int P : {2, 4})
    for (Placement pl : {Placement::host, Placement::device})
      expect_checked(layer_case("512/256/8/2", P, pl, {1, 77, 300}));
}

TEST(MoeLayerEmulated, ZipfRoutingOnAShapeWithManyExperts) {
  XSTAGE_NEED_GPUS(1);
  // 64 experts, top-6: under Zipf(1) at T = 77 most experts get few rows and
  // some none; at T = 1000 the popular ones take several tiles.
  for (int P : {2, 4})
    expect_checked(layer_case("1024/512/64/6", P, P == 2 ? Placement::host : Placement::device, {77, 1000},
                              MoeRouting::zipf));
}

TEST(MoeLayerEmulated, BothTilesForced) {
  XSTAGE_NEED_GPUS(1);
  for (MoeTile t : {MoeTile::m64n256, MoeTile::m128n256}) {
    MoeLayerBenchOptions o = layer_case("768/384/16/4", 4, Placement::device, {77, 257}, MoeRouting::zipf);
    o.tile = t;
    expect_checked(o);
  }
}

// Hidden and inter no multiple of any tile: the last n-block of L1 (2 inter
// columns) and of L2 (hidden) reaches past N and its stores stop there. 272 /
// 136: 16 columns in L2's last 256-column block and in L1's (8 of h); 2880
// (gpt-oss): 64 in L2's, 128 in L1's; 720 / 360 with both tiles forced.
TEST(MoeLayerEmulated, ShapesNoMultipleOfAnyTile) {
  XSTAGE_NEED_GPUS(1);
  expect_checked(layer_case("272/136/8/2", 2, Placement::host, {1, 77, 300}));
  MoeLayerBenchOptions g = layer_case("2880/2880/32/4", 2, Placement::device, {33, 200}, MoeRouting::zipf);
  g.check_tokens = 3;
  expect_checked(g);
  for (MoeTile t : {MoeTile::m64n256, MoeTile::m128n256}) {
    MoeLayerBenchOptions o = layer_case("720/360/16/4", 4, Placement::device, {77, 257}, MoeRouting::zipf);
    o.tile = t;
    expect_checked(o);
  }
}

// A routing given as arrays: expert 5 gets no token; tokens whose two experts
// both sit on rank 0 (0, 1) or rank 1 (6, 7); every other pair crosses ranks.
TEST(MoeLayerEmulated, GivenRoutingWithAnEmptyExpertAndOneRankTokens) {
  XSTAGE_NEED_GPUS(1);
  const int P = 2, T = 77, k = 2;
  MoeLayerBenchOptions o = layer_case("512/256/8/2", P, Placement::host, {T});
  const int pairs[6][2] = {{0, 1}, {2, 4}, {6, 7}, {1, 3}, {4, 0}, {7, 2}};
  for (int s = 0; s < P; ++s)
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < k; ++j) {
        o.ids.push_back(float(pairs[(t + s) % 6][j]));
        o.weights.push_back(j == 0 ? 0.3f : 0.7f);
      }
  expect_checked(o);
}

TEST(MoeLayerEmulated, RealShapesAtSmallT) {
  XSTAGE_NEED_GPUS(1);
  MoeLayerBenchOptions q = layer_case("qwen3-30b-a3b", 2, Placement::device, {33}, MoeRouting::zipf);
  q.check_tokens = 3;
  expect_checked(q);
  MoeLayerBenchOptions d = layer_case("deepseek-v3", 4, Placement::host, {16});
  d.check_tokens = 2;
  expect_checked(d);
  MoeLayerBenchOptions m = layer_case("mixtral-8x7b", 2, Placement::host, {77});
  m.check_tokens = 2;
  expect_checked(m);
}

// The bench's structure (not its speed): every body once a round, phases and
// clock per round, the traces of each schedule.
TEST(MoeLayerEmulated, BenchRoundsPhasesAndTraces) {
  XSTAGE_NEED_GPUS(1);
  MoeLayerBenchOptions o = layer_case("512/256/8/2", 2, Placement::host, {300});
  o.check = false, o.bench = true, o.rounds = 3, o.trace = true;
  const MoeLayerBenchReport rep = run_moe_layer_bench(o);
  ASSERT_EQ(rep.configs.size(), 1u);
  const auto& c = rep.configs[0];
  ASSERT_EQ(c.bodies.size(), 5u);
  ASSERT_EQ(c.ms.size(), 5u);
  for (size_t b = 0; b < 5; ++b) {
    ASSERT_EQ(c.ms[b].size(), 3u) << c.bodies[b];
    for (double t : c.ms[b]) EXPECT_GT(t, 0) << c.bodies[b];
    for (int p = 0; p < 3; ++p) EXPECT_EQ(c.phase_ms[b][p].size(), 3u) << c.bodies[b];
    EXPECT_GT(c.phase_ms[b][1][0], 0) << c.bodies[b] << ": the experts phase";
  }
  ASSERT_EQ(c.sm_clock_mhz.size(), 3u);
  for (double mhz : c.sm_clock_mhz) {
    EXPECT_GT(mhz, 300);
    EXPECT_LT(mhz, 3000);
  }
  std::set<std::pair<int, int>> seen;  // (schedule, gemm)
  for (const auto& t : c.trace) {
    seen.insert({int(t.schedule), t.tile.gemm});
    EXPECT_LE(t.tile.start_ns, t.tile.epilogue_ns);
    EXPECT_LE(t.tile.epilogue_ns, t.tile.end_ns);
    EXPECT_GE(t.tile.sm, 0);
  }
  EXPECT_EQ(seen.size(), 6u) << "every schedule's L1 and L2 tiles traced";
}

// The sweep record: every key present, null where absent (docs/design/moe-layer.md).
TEST(MoeLayerCommand, SweepRecordAndTraceFile) {
  XSTAGE_NEED_GPUS(1);
  const fs::path d = fs::temp_directory_path() / "xstage-moe-layer-gpu";
  fs::remove_all(d);
  fs::create_directories(d);
  const std::string out = (d / "sweep.json").string(), trace = (d / "trace.csv").string();
  const CliRun r = run_cli("moe --shape 512/256/8/2 --ranks 2 --tokens 77,129 --routing zipf --check --bench "
                           "--rounds 2 --json -o " + out + " --trace " + trace, false);
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  std::ifstream f(out);
  EXPECT_EQ(nlohmann::json::parse(f), j);
  for (const char* key : {"device", "driver", "sm_clock_mhz_max", "date", "commit", "command", "profile", "probe",
                          "configs"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_TRUE(j["probe"]["R_GBps"].is_null());  // no --floor-probe
  ASSERT_EQ(j["configs"].size(), 2u);
  for (const auto& c : j["configs"]) {
    for (const char* key : {"shape", "hidden", "inter", "experts", "topk", "tokens", "P", "backend", "placement",
                            "routing", "tile", "rows_max_rank", "rows_per_rank", "bytes_dispatch", "bytes_combine",
                            "plans", "rounds", "ms", "phase_ms", "sm_clock_mhz", "check"})
      EXPECT_TRUE(c.contains(key)) << key;
    EXPECT_EQ(c["routing"], "zipf");
    EXPECT_EQ(c["rounds"], 2);
    for (const char* b : {"fused/expert-wave", "fused/interleaved", "fused/model-guided", "unfused", "compute-only"}) {
      ASSERT_TRUE(c["ms"][b].is_array()) << b;
      EXPECT_EQ(c["ms"][b].size(), 2u) << b;
      for (const char* p : {"dispatch", "experts", "combine"}) EXPECT_EQ(c["phase_ms"][b][p].size(), 2u) << b << p;
    }
    for (const char* s : {"expert-wave", "interleaved", "model-guided"}) EXPECT_TRUE(c["plans"][s].is_object()) << s;
    EXPECT_EQ(c["check"]["ok"], true);
    EXPECT_EQ(c["check"]["bit_exact_vs_unfused"], true);
  }
  std::ifstream t(trace);
  std::string header;
  std::getline(t, header);
  EXPECT_EQ(header, "tokens,schedule,rank,gemm,sm,start_ns,epilogue_ns,end_ns");
  int rows = 0;
  for (std::string line; std::getline(t, line);) ++rows;
  EXPECT_GT(rows, 0);
  // A subset of the variants: the others' keys stay, null.
  const CliRun u = run_cli("moe --shape 512/256/8/2 --ranks 2 --tokens 77 --variants unfused --check --json", false);
  ASSERT_EQ(u.rc, 0) << u.out;
  const auto ju = nlohmann::json::parse(u.out)["configs"][0];
  EXPECT_TRUE(ju["ms"]["fused/interleaved"].is_null());
  EXPECT_TRUE(ju["plans"]["interleaved"].is_null());
  EXPECT_TRUE(ju["check"]["bit_exact_vs_unfused"].is_null());
  EXPECT_TRUE(ju["rounds"].is_null());
}

TEST(MoeLayerPeer, TwoGpusEveryScheduleChecked) {
  XSTAGE_NEED_GPUS(2);
  MoeLayerBenchOptions o = layer_case("1024/512/64/6", 2, Placement::device, {77, 600}, MoeRouting::zipf);
  o.world.backend = Backend::peer;
  expect_checked(o);
  MoeLayerBenchOptions h = layer_case("512/256/8/2", 2, Placement::host, {77});
  h.world.backend = Backend::peer;
  expect_checked(h);
  // Without --ranks the peer world takes every GPU, one rank each.
  // 24 experts split over 1, 2, 3, 4, 6 or 8 GPUs.
  const CliRun r = run_cli("moe --backend peer --shape 512/256/24/2 --tokens 77 --variants fused --check --json", false);
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out)["configs"][0];
  EXPECT_EQ(j["P"], cuda_device_count());
  EXPECT_EQ(j["check"]["ok"], true) << j["check"].dump();
}

TEST(MoeLayerNccl, LaunchedProcessesEveryScheduleChecked) {
  XSTAGE_NEED_GPUS(2);
#ifndef XSTAGE_HAVE_NCCL
  GTEST_SKIP() << "built without NCCL";
#endif
  const CliRun r = run_cli("launch -n 2 -- " + xstage_cli_path() +
                           " moe --backend nccl --shape 1024/512/64/6 --tokens 77,600 --routing zipf --check --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  // Rank 0 prints the record; the check values are the largest over ranks.
  const size_t open = r.out.find('{');
  ASSERT_NE(open, std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(open, r.out.rfind('}') - open + 1));
  ASSERT_EQ(j["configs"].size(), 2u);
  for (const auto& c : j["configs"]) {
    EXPECT_EQ(c["backend"], "nccl");
    EXPECT_EQ(c["check"]["ok"], true) << c["check"].dump();
    EXPECT_EQ(c["check"]["bit_exact_vs_unfused"], true);
  }
}
