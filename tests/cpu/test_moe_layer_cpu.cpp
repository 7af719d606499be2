// The MoE layer's host logic without a GPU: known shapes and their parser,
// schedule and variant names, option checks (each names what is wrong), the
// tile choice and the buffer sizes against the layouts written out by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "xstage/core/error.hpp"
#include "xstage/moe/moe_layer.hpp"

using namespace xstage;

namespace {

// The message of the Error `f` throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

MoeLayerOptions small_options() {
  MoeLayerOptions o;
  o.shape = {"custom", 512, 256, 8, 2};
  o.tokens_max = 100;
  return o;
}

}  // namespace

TEST(MoeLayerShapes, TheSixModelShapes) {
  const auto& s = moe_known_shapes();
  ASSERT_EQ(s.size(), 6u);
  const MoeShape v3 = parse_moe_shape("deepseek-v3");
  EXPECT_EQ(v3.hidden, 7168);
  EXPECT_EQ(v3.inter, 2048);
  EXPECT_EQ(v3.experts, 256);
  EXPECT_EQ(v3.topk, 8);
  const MoeShape mix = parse_moe_shape("mixtral-8x7b");
  EXPECT_EQ(mix.inter, 14336);
  EXPECT_EQ(mix.topk, 2);
  const MoeShape hd = parse_moe_shape("hidream-i1");
  EXPECT_EQ(hd.hidden, 2560);
  EXPECT_EQ(hd.experts, 4);
  // Every known shape runs on 2 and 4 ranks (the sweep's P).
  for (const MoeShape& k : s)
    for (int P : {2, 4}) {
      MoeLayerOptions o;
      o.shape = k;
      o.tokens_max = 256;
      EXPECT_NO_THROW(validate_moe_layer_options(o, P)) << k.name << " P = " << P;
    }
}

TEST(MoeLayerShapes, CustomShapeFromFourNumbers) {
  EXPECT_EQ(parse_moe_shape("qwen3-235b-a22b").name, "qwen3-235b");  // moe-gemm's name of the same shape
  const MoeShape c = parse_moe_shape("4096/1536/128/8");
  EXPECT_EQ(c.name, "custom");
  EXPECT_EQ(c.hidden, 4096);
  EXPECT_EQ(c.inter, 1536);
  EXPECT_EQ(c.experts, 128);
  EXPECT_EQ(c.topk, 8);
}

TEST(MoeLayerShapes, MalformedShapesNameTheKnownOnes) {
  for (const char* bad : {"", "deepseek", "4096/1536/128", "4096/1536/128/8/2", "4096//128/8", "a/b/c/d",
                          "4096/1536/128/0", "-1/1536/128/8", "4096/1536/128/8x", " 4096/1536/128/8"}) {
    const std::string msg = error_of([&] { parse_moe_shape(bad); });
    EXPECT_NE(msg.find("hidden/inter/experts/topk"), std::string::npos) << "'" << bad << "': " << msg;
    EXPECT_NE(msg.find("qwen3-30b-a3b"), std::string::npos) << msg;
  }
}

TEST(MoeLayerNames, SchedulesAndVariantsRoundTrip) {
  for (auto s : {MoeSchedule::expert_wave, MoeSchedule::interleaved, MoeSchedule::model_guided})
    EXPECT_EQ(parse_moe_schedule(to_string(s)), s);
  for (auto v : {MoeLayerVariant::fused, MoeLayerVariant::unfused, MoeLayerVariant::compute_only})
    EXPECT_EQ(parse_moe_layer_variant(to_string(v)), v);
  EXPECT_EQ(to_string(MoeSchedule::expert_wave), "expert-wave");
  EXPECT_EQ(to_string(MoeLayerVariant::compute_only), "compute-only");
  EXPECT_NE(error_of([] { parse_moe_schedule("wave"); }).find("expert-wave, interleaved or model-guided"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_moe_layer_variant("compute_only"); }).find("fused, unfused or compute-only"),
            std::string::npos);
}

TEST(MoeLayerOptions, EachBadOptionIsNamed) {
  struct Bad {
    const char* expect;
    void (*edit)(MoeLayerOptions&, int&);
  };
  const Bad cases[] = {
      {"ranks P", [](MoeLayerOptions&, int& P) { P = 0; }},
      {"hidden = 392: expected a positive multiple of 16", [](MoeLayerOptions& o, int&) { o.shape.hidden = 392; }},
      {"hidden = 0", [](MoeLayerOptions& o, int&) { o.shape.hidden = 0; }},
      {"inter = 204: expected a positive multiple of 8", [](MoeLayerOptions& o, int&) { o.shape.inter = 204; }},
      {"experts = 8: expected a positive multiple of P = 3", [](MoeLayerOptions&, int& P) { P = 3; }},
      {"experts = 0", [](MoeLayerOptions& o, int&) { o.shape.experts = 0; }},
      {"topk = 0", [](MoeLayerOptions& o, int&) { o.shape.topk = 0; }},
      {"topk = 9", [](MoeLayerOptions& o, int&) { o.shape.topk = 9; }},
      {"tokens_max = 0", [](MoeLayerOptions& o, int&) { o.tokens_max = 0; }},
      {"tile m128n128", [](MoeLayerOptions& o, int&) { o.tile = MoeTile::m128n128; }},
      {"timeout = 0", [](MoeLayerOptions& o, int&) { o.timeout_s = 0; }},
      {"timeout = nan", [](MoeLayerOptions& o, int&) { o.timeout_s = std::nan(""); }},
      {"timeout = inf", [](MoeLayerOptions& o, int&) { o.timeout_s = INFINITY; }},
      {"tokens_max x topk", [](MoeLayerOptions& o, int&) { o.tokens_max = std::numeric_limits<int>::max(); }},
      {"pool rows", [](MoeLayerOptions& o, int&) { o.tokens_max = 300'000'000; }},
  };
  for (const Bad& c : cases) {
    MoeLayerOptions o = small_options();
    int P = 2;
    c.edit(o, P);
    const std::string msg = error_of([&] { validate_moe_layer_options(o, P); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "expected '" << c.expect << "' in: " << msg;
    // The sizes refuse what the checks refuse.
    EXPECT_FALSE(error_of([&] { moe_layer_sizes(o, P); }).empty()) << c.expect;
  }
  EXPECT_NO_THROW(validate_moe_layer_options(small_options(), 2));
}

TEST(MoeLayerTile, ShortTileWhenExpertsGetFewRows) {
  MoeLayerOptions o;
  o.shape = parse_moe_shape("deepseek-v3");
  o.tokens_max = 256;  // 256 x 8 x 2 / 256 = 16 rows an expert
  EXPECT_EQ(moe_layer_tile(o, 2), MoeTile::m64n256);
  o.tokens_max = 1024;  // 64 rows: still short
  EXPECT_EQ(moe_layer_tile(o, 2), MoeTile::m64n256);
  o.tokens_max = 1025;
  EXPECT_EQ(moe_layer_tile(o, 2), MoeTile::m128n256);
  o.tile = MoeTile::m64n256;  // forced
  EXPECT_EQ(moe_layer_tile(o, 2), MoeTile::m64n256);
  o.shape = parse_moe_shape("mixtral-8x7b");  // 8 experts, k = 2: 256 x 2 x 2 / 8 = 128 rows
  o.tile = MoeTile::automatic;
  o.tokens_max = 256;
  EXPECT_EQ(moe_layer_tile(o, 2), MoeTile::m128n256);
}

TEST(MoeLayerSizes, LayoutsWrittenOut) {
  // hidden 512, inter 256, E 8, k 2, P 2, T_max 100: E_loc 4, rows_cap 2 x 100 x 2.
  const MoeLayerOptions o = small_options();
  const MoeLayerSizes z = moe_layer_sizes(o, 2);
  EXPECT_EQ(z.rows_cap, 400);
  EXPECT_EQ(z.x_send, 100u * 512 * 2);
  EXPECT_EQ(z.routes, 2u * 4 * 100 * 8);  // int32 index + fp32 weight per (source, local expert, token)
  EXPECT_EQ(z.counts, 2u * 4 * 4);
  EXPECT_EQ(z.combine, 2u * 100 * 512 * 2);
  EXPECT_EQ(z.flags, 4u * 8);
  EXPECT_EQ(z.pool_x, 400u * 512 * 2);
  EXPECT_EQ(z.pool_h, 400u * 256 * 2);
  EXPECT_EQ(z.pool_out, 400u * 512 * 2);
  EXPECT_EQ(z.row_meta, 400u * 16 + 100u * 2 * 12 + (4 + 9 + 1) * 4);
  EXPECT_EQ(z.weights, 4u * (2 * 256 * 512 + 512 * 256) * 2);
  EXPECT_EQ(z.output, 100u * 512 * 2);
  // 100 x 2 x 2 / 8 = 50 rows an expert: the 64-row tile. L1: (400 / 64 + 4)
  // m-blocks x 512 / 256 n-blocks; L2 the same. Trace: [2][tiles][4] uint64.
  const size_t tiles = (400 / 64 + 4) * 2;
  EXPECT_GE(z.workspace, 2 * tiles * 4 * 8);
  EXPECT_LT(z.workspace, 2 * tiles * 4 * 8 + 512);
  EXPECT_EQ(z.symmetric_total(), z.x_send + z.routes + z.counts + z.combine + z.flags);
  EXPECT_EQ(z.local_total(), z.pool_x + z.pool_h + z.pool_out + z.row_meta + z.weights + z.workspace + z.output);
}

TEST(MoeLayerSizes, ShapesNoMultipleOfAnyTileAreSizedByWholeBlocks) {
  // gpt-oss's 2880 / 2880 (no multiple of 256 or 128), E 32, k 4, P 2, T_max 64:
  // rows_cap 2 x 64 x 4 = 512, 64 x 4 x 2 / 32 = 16 rows an expert (the 64-row tile).
  MoeLayerOptions o = small_options();
  o.shape = MoeShape{"", 2880, 2880, 32, 4};
  o.tokens_max = 64;
  EXPECT_NO_THROW(validate_moe_layer_options(o, 2));
  const MoeLayerSizes z = moe_layer_sizes(o, 2);
  EXPECT_EQ(z.rows_cap, 512);
  EXPECT_EQ(z.pool_h, 512u * 2880 * 2);
  // L1's N = 5760: 23 n-blocks (22.5); L2's 2880: 12 (11.25); the trace is
  // sized for the larger, [2][tiles][4] uint64.
  const size_t tiles = (512 / 64 + 16) * 23;
  EXPECT_GE(z.workspace, 2 * tiles * 4 * 8);
  EXPECT_LT(z.workspace, 2 * tiles * 4 * 8 + 1024);
  o.shape = MoeShape{"", 272, 136, 8, 2};  // the smallest steps: hidden 16 + 256, inter 8 + 128
  EXPECT_NO_THROW(moe_layer_sizes(o, 2));
}

TEST(MoeLayerSizes, PoolCapacityCountsATokenOncePerExpert) {
  // k larger than a rank's experts: a token sends a rank at most E_loc rows.
  MoeLayerOptions o;
  o.shape = {"custom", 256, 128, 4, 3};
  o.tokens_max = 10;
  EXPECT_EQ(moe_layer_sizes(o, 4).rows_cap, 4 * 10 * 1);
  EXPECT_EQ(moe_layer_sizes(o, 2).rows_cap, 2 * 10 * 2);
  EXPECT_EQ(moe_layer_sizes(o, 1).rows_cap, 1 * 10 * 3);
}

TEST(MoeLayerSizes, DeepSeekV3AtTheSweepsLargestPoint) {
  MoeLayerOptions o;
  o.shape = parse_moe_shape("deepseek-v3");
  o.tokens_max = 16384;
  const MoeLayerSizes z = moe_layer_sizes(o, 4);
  EXPECT_EQ(z.rows_cap, 4 * 16384 * 8);
  EXPECT_EQ(z.combine, size_t(8) * 16384 * 7168 * 2);      // 1.75 GiB
  EXPECT_EQ(z.weights, size_t(64) * 3 * 2048 * 7168 * 2);  // 5.25 GiB of expert weights
  EXPECT_EQ(z.pool_x, size_t(4) * 16384 * 8 * 7168 * 2);   // 7 GiB: every token could come here
}
