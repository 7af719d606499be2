// xstage moe on the CPU: the routing it draws (distinct experts, Zipf skew,
// softmax weights, a token on one rank), what crosses ranks, the tokens the
// check compares, and bad input rejected before any GPU work with one clear
// error line and exit 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "harness/moe/moe_layer_bench.hpp"
#include "util/npy.hpp"
#include "xstage/core/error.hpp"

using namespace xstage;
namespace fs = std::filesystem;

namespace {

void expect_routes_valid(const MoeRoutes& r, int E, int k, int T) {
  ASSERT_EQ(r.T, T);
  ASSERT_EQ(r.ids.size(), size_t(T) * k);
  ASSERT_EQ(r.weights.size(), size_t(T) * k);
  EXPECT_NO_THROW(validate_moe_routes(r, E, "test"));
  for (int t = 0; t < T; ++t) {
    double sum = 0;
    for (int j = 0; j < k; ++j) {
      const float w = r.weights[size_t(t) * k + j];
      EXPECT_GT(w, 0.f);
      sum += w;
    }
    EXPECT_NEAR(sum, 1.0, 1e-5) << "token " << t;
  }
}

std::vector<int> expert_counts(const MoeRoutes& r, int E) {
  std::vector<int> c(E, 0);
  for (int32_t e : r.ids) ++c[e];
  return c;
}

void expect_clear_error(const std::string& args, const std::string& fragment) {
  const CliRun r = run_cli(args);
  EXPECT_EQ(r.rc, 2) << args << "\n" << r.out;
  EXPECT_NE(r.out.find(fragment), std::string::npos) << args << "\n" << r.out;
  EXPECT_EQ(r.out.find("internal error"), std::string::npos) << args << "\n" << r.out;
}

fs::path scratch() {
  const fs::path d = fs::temp_directory_path() / "xstage-moe-layer-cli";
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

}  // namespace

TEST(MoeRouting, UniformAndZipfDrawDistinctExpertsWithSoftmaxWeights) {
  for (MoeRouting kind : {MoeRouting::uniform, MoeRouting::zipf})
    for (auto [E, k, P] : std::vector<std::array<int, 3>>{{8, 2, 2}, {256, 8, 4}, {4, 2, 2}, {8, 8, 1}}) {
      const MoeRoutes r = moe_make_routes(kind, E, k, P, 77, 5, P - 1);
      expect_routes_valid(r, E, k, 77);
    }
}

TEST(MoeRouting, DeterministicPerSeedAndRankDifferentAcrossRanks) {
  const MoeRoutes a = moe_make_routes(MoeRouting::zipf, 64, 4, 4, 300, 9, 1);
  const MoeRoutes b = moe_make_routes(MoeRouting::zipf, 64, 4, 4, 300, 9, 1);
  const MoeRoutes c = moe_make_routes(MoeRouting::zipf, 64, 4, 4, 300, 9, 2);
  const MoeRoutes d = moe_make_routes(MoeRouting::zipf, 64, 4, 4, 300, 10, 1);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.weights, b.weights);
  EXPECT_NE(a.ids, c.ids);
  EXPECT_NE(a.ids, d.ids);
}

TEST(MoeRouting, TokenZeroRoutesEveryPickToOneRank) {
  for (MoeRouting kind : {MoeRouting::uniform, MoeRouting::zipf})
    for (int rank = 0; rank < 4; ++rank) {
      const MoeRoutes r = moe_make_routes(kind, 64, 8, 4, 10, 3, rank);
      const int owner = r.ids[0] / 16;
      EXPECT_EQ(owner, (rank + 1) % 4);
      for (int j = 1; j < 8; ++j) EXPECT_EQ(r.ids[j] / 16, owner) << "slot " << j;
    }
  // A rank owning fewer experts than k: no such token can exist, nothing forced.
  const MoeRoutes r = moe_make_routes(MoeRouting::uniform, 8, 4, 4, 10, 3, 0);
  expect_routes_valid(r, 8, 4, 10);
}

TEST(MoeRouting, ZipfIsSkewedAndUniformIsNot) {
  const int E = 64, k = 2, T = 20000;
  std::vector<int> z = expert_counts(moe_make_routes(MoeRouting::zipf, E, k, 2, T, 1, 0), E);
  std::vector<int> u = expert_counts(moe_make_routes(MoeRouting::uniform, E, k, 2, T, 1, 0), E);
  std::sort(z.begin(), z.end(), std::greater<>());
  std::sort(u.begin(), u.end(), std::greater<>());
  // Zipf(1) over 64 experts: the most popular has about 1 / H_64 = 21% of the
  // draws (less, k distinct), the 32nd about 1/32 of that.
  EXPECT_GT(z[0], 8 * z[E / 2]) << z[0] << " vs " << z[E / 2];
  EXPECT_GT(z[0], 2 * z[3]);
  EXPECT_LT(u[0], 1.25 * u[E - 1]) << u[0] << " vs " << u[E - 1];
  EXPECT_EQ(std::accumulate(u.begin(), u.end(), 0), T * k);
}

TEST(MoeRouting, ValidationNamesTokenSlotAndExpert) {
  MoeRoutes r;
  r.T = 2, r.k = 2;
  r.ids = {0, 1, 3, 3};
  r.weights = {0.5f, 0.5f, 0.5f, 0.5f};
  try {
    validate_moe_routes(r, 4, "--ids rank 1");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--ids rank 1: token 1: expert 3 in slots 0 and 1"), std::string::npos)
        << e.what();
  }
  r.ids = {0, 4, 1, 2};
  EXPECT_THROW(validate_moe_routes(r, 4, "x"), Error);
  r.ids = {0, 1, 2, 3};
  r.weights[2] = NAN;
  EXPECT_THROW(validate_moe_routes(r, 4, "x"), Error);
}

TEST(MoeTraffic, PairsRowsAndBytesByBackend) {
  // P = 2, E = 4 (rank 0 owns experts 0, 1), k = 2, hidden 256 (512-byte rows).
  MoeRoutes s0, s1;
  s0.T = 3, s0.k = 2, s0.ids = {0, 1, 0, 2, 3, 2}, s0.weights.assign(6, 0.5f);
  s1.T = 1, s1.k = 2, s1.ids = {1, 3}, s1.weights.assign(2, 0.5f);
  const MoeTraffic t = moe_traffic({s0, s1}, 4, 2, 256, Backend::emulated, Placement::host);
  EXPECT_EQ(t.pairs, (std::vector<std::vector<int64_t>>{{3, 3}, {1, 1}}));
  EXPECT_EQ(t.rows_per_rank, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(t.rows_max_rank, 4);
  EXPECT_EQ(t.bytes_dispatch, 3 * 512.0);  // rank 1 pulls 3 rows from rank 0
  EXPECT_EQ(t.bytes_combine, 3 * 512.0);
  EXPECT_EQ(t.bytes_floor, 2 * 8 * 512.0);  // one GPU: every row in and out
  EXPECT_EQ(moe_traffic({s0, s1}, 4, 2, 256, Backend::peer, Placement::device).bytes_floor, 2 * 3 * 512.0);
  EXPECT_EQ(moe_traffic({s0, s1}, 4, 2, 256, Backend::peer, Placement::host).bytes_floor, 2 * 4 * 512.0);
}

TEST(MoeCheckTokens, LastFirstAndOneRankTokenAmongThem) {
  MoeRoutes r = moe_make_routes(MoeRouting::uniform, 16, 2, 2, 77, 4, 0);
  // Make token 0 cross ranks and token 40 the first on one rank.
  r.ids[0] = 0, r.ids[1] = 8;
  for (int t = 1; t < 77; ++t) r.ids[2 * t] = t % 8, r.ids[2 * t + 1] = 8 + (t % 8);
  r.ids[80] = 3, r.ids[81] = 5;
  const std::vector<int> tok = moe_check_tokens(r, 8, 6, 1);
  EXPECT_EQ(tok.size(), 6u);
  for (int want : {0, 40, 76}) EXPECT_NE(std::find(tok.begin(), tok.end(), want), tok.end()) << want;
  EXPECT_EQ(std::set<int>(tok.begin(), tok.end()).size(), tok.size());
  MoeRoutes one = moe_make_routes(MoeRouting::uniform, 16, 2, 2, 1, 4, 0);
  EXPECT_EQ(moe_check_tokens(one, 8, 6, 1), std::vector<int>{0});
}

// ---- the command: every case below fails before looking for a GPU

TEST(MoeCommand, BadShapesAndRanks) {
  expect_clear_error("moe --tokens 8", "--shape");
  expect_clear_error("moe --shape no-such-model --tokens 8", "no-such-model");
  expect_clear_error("moe --shape 500/256/8/2 --tokens 8", "hidden = 500: expected a positive multiple of 16");
  expect_clear_error("moe --shape 512/204/8/2 --tokens 8", "inter = 204: expected a positive multiple of 8");
  expect_clear_error("moe --shape 512/256/8/9 --tokens 8", "topk = 9: expected 1 .. experts = 8");
  expect_clear_error("moe --shape 512/256/8/2 --ranks 3 --tokens 8", "experts = 8: expected a positive multiple of P = 3");
  expect_clear_error("moe --shape 512/256/8/2 --ranks 0", "--ranks");
  expect_clear_error("moe --shape 512/256/8/2 --backend nccl --placement host --ranks 2", "host");
}

TEST(MoeCommand, BadOptions) {
  const std::string base = "moe --shape 512/256/8/2 --ranks 2 ";
  expect_clear_error(base + "--tokens 0", "--tokens: expected 1 .. 2^20");
  expect_clear_error(base + "--tokens 8,-1", "--tokens");
  expect_clear_error(base + "--routing pareto", "expected uniform or zipf");
  expect_clear_error(base + "--schedules interleaved,bogus", "bogus");
  expect_clear_error(base + "--schedules interleaved,interleaved", "given twice");
  expect_clear_error(base + "--variants fused,nope", "nope");
  expect_clear_error(base + "--variants unfused --schedules interleaved", "which --variants leaves out");
  expect_clear_error(base + "--tile m128n128", "expected m128n256, m64n256 or auto");
  expect_clear_error(base + "--tile huge", "huge");
  expect_clear_error(base + "--rounds 0 --bench", "--rounds: expected >= 1");
  expect_clear_error(base + "--warmup -1", "--warmup");
  expect_clear_error(base + "--timeout 0", "--timeout");
  expect_clear_error(base + "--check-tokens -2", "--check-tokens");
  expect_clear_error(base + "--profile none", "model-guided schedule needs a profile");
  expect_clear_error(base + "--profile /no/such/profile.json", "--profile");
}

TEST(MoeCommand, BadInputFiles) {
  const fs::path d = scratch();
  // P = 2, T = 3, hidden 512, k = 2.
  std::vector<float> ids = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3}, w(12, 0.5f), x(2 * 3 * 512, 0.1f);
  write_npy((d / "ids.npy").string(), {2, 3, 2}, ids.data());
  write_npy((d / "w.npy").string(), {2, 3, 2}, w.data());
  write_npy((d / "x.npy").string(), {2, 3, 512}, x.data());
  write_npy((d / "ids_bad_shape.npy").string(), {2, 2, 3}, ids.data());
  std::vector<float> frac = ids, dup = ids, range = ids;
  frac[5] = 2.5f;
  dup[3] = dup[2];
  range[7] = 8;
  write_npy((d / "frac.npy").string(), {2, 3, 2}, frac.data());
  write_npy((d / "dup.npy").string(), {2, 3, 2}, dup.data());
  write_npy((d / "range.npy").string(), {2, 3, 2}, range.data());
  const std::string base = "moe --shape 512/256/8/2 --ranks 2 ";
  const std::string p = d.string() + "/";
  expect_clear_error(base + "--ids " + p + "ids_bad_shape.npy --weights " + p + "w.npy",
                     "expected shape [P, T, top-k] = [2, 2, 2], got [2, 2, 3]");
  expect_clear_error(base + "--ids " + p + "frac.npy --weights " + p + "w.npy", "is not a whole number");
  expect_clear_error(base + "--ids " + p + "dup.npy --weights " + p + "w.npy", "expected k distinct experts");
  expect_clear_error(base + "--ids " + p + "range.npy --weights " + p + "w.npy", "expert 8; expected an expert id from 0 to 7");
  expect_clear_error(base + "--ids " + p + "ids.npy", "both");
  expect_clear_error(base + "--ids " + p + "ids.npy --weights " + p + "w.npy --routing zipf", "--routing");
  expect_clear_error(base + "--ids " + p + "ids.npy --weights " + p + "w.npy --tokens 4", "[P, T, top-k] = [2, 4, 2]");
  expect_clear_error(base + "--x " + p + "x.npy --tokens 3,4", "one token count");
  expect_clear_error(base + "--w13 " + p + "x.npy", "--w13");
  expect_clear_error(base + "--x " + p + "missing.npy", "missing.npy");
  expect_clear_error(base + "--tokens 8 -o " + p, "-o");
}

// The sizes need no GPU; they grow with T_max and P as moe_layer_sizes says.
TEST(MoeCommand, DryRunPrintsSizes) {
  const CliRun j = run_cli("moe --shape 512/256/8/2 --ranks 2 --tokens 77,300 --dry-run --json", false);
  ASSERT_EQ(j.rc, 0) << j.out;
  const auto doc = nlohmann::json::parse(j.out);
  for (const char* key : {"shape", "hidden", "inter", "experts", "topk", "P", "tokens_max", "backend", "placement",
                          "sizes"})
    EXPECT_TRUE(doc.contains(key)) << key;
  EXPECT_EQ(doc["tokens_max"], 300);
  EXPECT_EQ(doc["placement"], "host");  // emulated ranks: the PCIe path by default
  const auto& s = doc["sizes"];
  for (const char* key : {"rows_cap", "x_send", "routes", "counts", "combine", "flags", "pool_x", "pool_h", "pool_out",
                          "row_meta", "weights", "workspace", "output", "symmetric_total", "local_total"})
    EXPECT_TRUE(s.contains(key)) << key;
  EXPECT_EQ(s["rows_cap"], 2 * 300 * 2);  // P * T_max * min(k, E / P)
  EXPECT_GE(s["combine"].get<double>(), 2.0 * 300 * 512 * 2);  // bf16 [k][T_max][hidden]
  const CliRun t = run_cli("moe --shape 512/256/8/2 --ranks 2 --tokens 300 --dry-run");
  ASSERT_EQ(t.rc, 0) << t.out;
  EXPECT_NE(t.out.find("P = 2, up to 300 tokens a rank"), std::string::npos) << t.out;
}
