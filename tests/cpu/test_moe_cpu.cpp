// MoE grouped GEMM host logic without a GPU: the tile heuristic, the W13
// interleave, the SwiGLU reference, the check's row plan, argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "cli_runner.hpp"
#include "device/sched/tail_split.hpp"
#include "harness/moe/moe_bench.hpp"
#include "harness/moe/moe_check.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/moe/moe.hpp"
#include "xstage/moe/moe_layer.hpp"

using namespace xstage;

TEST(MoeTiles, SmallExpertsTakeTheShortTile) {
  // 32 experts of 64 rows, N = 4096: m64 tiles waste no rows.
  EXPECT_EQ(moe_pick_tile(32 * 64, 32, 4096, 2048, 132), MoeTile::m64n256);
  // Many rows an expert: the big tile.
  EXPECT_EQ(moe_pick_tile(32 * 4096, 32, 4096, 2048, 132), MoeTile::m128n256);
  // Many experts: one split.
  EXPECT_EQ(moe_pick_splits(128 * 256, 128, 7168, 2048, MoeTile::m128n256, 132), 1);
}

TEST(MoeTiles, NarrowNTakesTheTileThatPadsLeast) {
  // 64 experts of 256 rows, N = 384: 128 x 128 tiles cover it exactly (3 waves), 256-wide ones pad it to 512
  // (2 waves of twice the work).
  EXPECT_EQ(moe_pick_tile(64 * 256, 64, 128 * 3, 4096, 132), MoeTile::m128n128);
}

// Few tiles: cells of the split study (results/h200/moe/split-study/) where the fitted model's choice is the
// measured fastest of every tile and split forced.
TEST(MoeTiles, FewTilesTakeTheStudysFastestTileAndSplits) {
  struct Case {
    int rows, E, N, K;
    bool narrow;
    MoeTile tile;
    int splits;
  } cases[] = {
      {128, 1, 4096, 640, true, MoeTile::m64n80, 1},       // L2, 1 expert of 128 rows, K = 640: 1.98x torch
      {128, 1, 1280, 4096, false, MoeTile::m128n128, 4},   // L1 of the same cell: 1.17x (no split: 0.99x)
      {64, 1, 2048, 7168, false, MoeTile::m64n256, 4},     // L1, 1 expert of 64 rows, K = 7168: 1.38x (2: 1.05x)
      {64, 1, 7168, 1024, true, MoeTile::m64n80, 1},       // its L2: 1.91x (64 x 256: 1.44x)
      {2 * 128, 2, 1536, 3072, true, MoeTile::m64n80, 1},  // L2, 2 of 128 rows: 1.21x (128 x 128: 0.96x)
      {64, 1, 3072, 14336, true, MoeTile::m64n80, 3},      // L2, K = 14336: 1.69x (64 x 256 / 4: 1.18x)
  };
  for (const Case& c : cases) {
    const MoeTile t = moe_pick_tile(c.rows, c.E, c.N, c.K, 132, c.narrow);
    EXPECT_EQ(t, c.tile) << c.rows << " rows, E " << c.E << ", N " << c.N << ", K " << c.K;
    EXPECT_EQ(moe_pick_splits(c.rows, c.E, c.N, c.K, t, 132), c.splits) << c.rows << " rows, N " << c.N;
  }
}

// One wave of 128 x 256 tiles at the mean: 128 x 128 halves what skewed counts spill (split study, one-wave band).
TEST(MoeTiles, OneWaveOfWideTilesOnSeveralExpertsTakesTheHalfTile) {
  // 4 experts of 128 rows, N = 7168: 112 tiles of 128 x 256 at the mean; Zipf counts made them 140 (0.92x torch,
  // 128 x 128: 1.17x).
  EXPECT_EQ(moe_pick_tile(4 * 128, 4, 7168, 4096, 132), MoeTile::m128n128);
  // One expert has no skew: 1024 rows, N = 4096, 128 tiles stay 128 x 256.
  EXPECT_EQ(moe_pick_tile(1024, 1, 4096, 14336, 132), MoeTile::m128n256);
  // Up to 64 rows an expert the 64-row tile stands (16 experts, N = 2048: 128 wide tiles).
  EXPECT_EQ(moe_pick_tile(16 * 64, 16, 2048, 4096, 132), MoeTile::m64n256);
  // Past one wave the wide rule stands (8 experts of 512 rows, N = 4096: 512 tiles).
  EXPECT_EQ(moe_pick_tile(8 * 512, 8, 4096, 4096, 132), MoeTile::m128n256);
}

// The model shapes' few-tile cells, where the earlier sweeps measured the choice (perf-log MoE 3, 4).
TEST(MoeTiles, FewTilesKeepTheSweepsChoicesOnTheModelShapes) {
  // Mixtral P = 8, L2 (one expert, N = 4096, K = 14336), 128 rows: 4 splits of 128 x 128 (0.83x to 1.23-1.32x
  // torch; the table study: 1.28x, 3 splits 1.31x).
  EXPECT_EQ(moe_pick_tile(128, 1, 4096, 14336, 132, true), MoeTile::m128n128);
  EXPECT_EQ(moe_pick_splits(128, 1, 4096, 14336, MoeTile::m128n128, 132), 4);
  // Mixtral P = 2 (4 experts), 64 rows: 2 splits of 64 x 256 (1.09x to 1.38x in the sweeps; the table study
  // measured them at 1.37x and one split at 1.45x: near choices, the model's margin between them small).
  EXPECT_EQ(moe_pick_tile(4 * 64, 4, 4096, 14336, 132, true), MoeTile::m64n256);
  EXPECT_EQ(moe_pick_splits(4 * 64, 4, 4096, 14336, MoeTile::m64n256, 132), 2);
}

TEST(MoeTiles, TheNarrowTileOnlyWhereItIsBuilt) {
  // HiDream-I1 P = 2, L2 (2 experts, N = 2560), 128 rows: the narrow tile, its tuned case (1.35-1.45x torch
  // against 0.94-1.15x for the wide tiles, perf-log MoE 11).
  EXPECT_EQ(moe_pick_tile(2 * 128, 2, 2560, 6912, 132, true), MoeTile::m64n80);
  EXPECT_NE(moe_pick_tile(2 * 128, 2, 2560, 6912, 132, false), MoeTile::m64n80);
  // Any N (its columns past N are masked): 272 = 3.4 x 80.
  EXPECT_EQ(moe_pick_tile(2 * 64, 2, 272, 2048, 132, true), MoeTile::m64n80);
  EXPECT_TRUE(moe_narrow_tile_built(MoeGemmKind::l2, MoeOutStore::automatic));
  EXPECT_TRUE(moe_narrow_tile_built(MoeGemmKind::l2, MoeOutStore::warp_staged));
  EXPECT_FALSE(moe_narrow_tile_built(MoeGemmKind::l2, MoeOutStore::warp_tma));
  EXPECT_FALSE(moe_narrow_tile_built(MoeGemmKind::l1_swiglu, MoeOutStore::automatic));
}

// The rule's invariants over a broad grid of sizes: splits only with few tiles, at most kMoeMaxSplits and
// ceil(K / 64); the narrow tile only where built.
TEST(MoeTiles, SplitsOnlyWithFewTilesAndWithinTheirLimits) {
  const int sms = 132;
  for (int E : {1, 2, 3, 4, 8, 16, 64, 256})
    for (int m : {1, 17, 32, 64, 100, 128, 256, 512, 4096})
      for (int N : {48, 272, 1280, 2880, 4096, 14336})
        for (int K : {64, 640, 2048, 7168, 14336})
          for (bool narrow : {false, true}) {
            const MoeTile t = moe_pick_tile(m * E, E, N, K, sms, narrow);
            const int s = moe_pick_splits(m * E, E, N, K, t, sms);
            SCOPED_TRACE(::testing::Message() << "E " << E << ", " << m << " rows, N " << N << ", K " << K);
            if (!narrow) EXPECT_NE(t, MoeTile::m64n80);
            EXPECT_GE(s, 1);
            EXPECT_LE(s, std::min(kMoeMaxSplits, (K + 63) / 64));
            const int64_t wide = int64_t(E) * ((m + 127) / 128) * ((N + 255) / 256);
            if (2 * wide > sms) EXPECT_EQ(s, 1);
          }
}

TEST(MoeTiles, SkewedCountsKeepTheSplitsInOneWave) {
  // 16 experts of 32 rows on average, N = 512, K = 4096: 32 tiles of 64 x 256, which 4 splits would fill to
  // 128 items at the mean; Zipf-skewed counts gave 0.85x torch there (split study). The expected cost, which
  // counts one more m-block an expert at 0.3, takes 2 splits at most.
  const MoeTile t = moe_pick_tile(16 * 32, 16, 512, 4096, 132);
  EXPECT_LE(moe_pick_splits(16 * 32, 16, 512, 4096, t, 132), 2);
}

TEST(MoeTiles, UpTo64RowsAnExpertTakeThe64RowTile) {
  // Where the 128 x 256 tiles fill more than half the SMs: 16 experts of 64 rows, N = 4096 (256 of them).
  EXPECT_EQ(moe_pick_tile(16 * 64, 16, 4096, 2048, 132), MoeTile::m64n256);
  // Where 256-wide tiles would pad N more (N = 384: 512 against 384) the cost model decides: 128 experts, 256
  // tiles of 64 x 256 in 2 waves against 384 of 128 x 128 in 3.
  EXPECT_EQ(moe_pick_tile(128 * 64, 128, 128 * 3, 2048, 132), MoeTile::m64n256);
}

TEST(MoeW13, InterleaveTakesGateAndUpInGroupsOfEight) {
  const int E = 2, I = 16, K = 3;
  std::vector<uint16_t> src(size_t(E) * 2 * I * K), dst(src.size());
  std::iota(src.begin(), src.end(), uint16_t(0));
  moe_interleave_w13(src.data(), dst.data(), E, I, K);
  for (int e = 0; e < E; ++e)
    for (int r = 0; r < 2 * I; ++r) {
      const int want = r % 16 < 8 ? 8 * (r / 16) + r % 16 : I + 8 * (r / 16) + r % 16 - 8;
      EXPECT_EQ(dst[(size_t(e) * 2 * I + r) * K], src[(size_t(e) * 2 * I + want) * K]) << e << " " << r;
    }
}

TEST(MoeReference, SwigluPairsInterleavedColumns) {
  std::vector<double> gu(32), out(16);
  for (int i = 0; i < 32; ++i) gu[i] = 0.1 * (i + 1);
  moe_reference_swiglu(gu.data(), 16, 0.5, out.data());
  for (int i = 0; i < 16; ++i) {
    const double g = gu[16 * (i / 8) + i % 8], u = gu[16 * (i / 8) + 8 + i % 8];
    EXPECT_NEAR(out[i], g / (1 + std::exp(-g)) * u * 0.5, 1e-12);
  }
}

TEST(MoeCheck, PlanCoversBothEndsAndSkipsEmptyExperts) {
  const std::vector<int32_t> offs = {0, 100, 100, 230, 230};
  const MoeCheckPlan p = moe_check_plan(offs, 1, 16);
  for (int e : p.experts) EXPECT_TRUE(e == 1 || e == 3) << e;
  ASSERT_FALSE(p.experts.empty());
  for (size_t i = 0; i < p.experts.size(); ++i) {
    const int e = p.experts[i], begin = offs[e - 1], end = offs[e];
    EXPECT_EQ(p.rows[i].front(), begin);
    EXPECT_EQ(p.rows[i].back(), end - 1);
  }
}

TEST(MoeCounts, UnevenKeepsTheTotalAndEmptiesSomeExperts) {
  const std::vector<int> c = moe_expert_counts(16, 128, true, 3);
  EXPECT_EQ(std::accumulate(c.begin(), c.end(), 0), 16 * 128);
  EXPECT_EQ(c[0], 0);
  int ragged = 0;
  for (int v : c) ragged += v % 64 != 0;
  EXPECT_GT(ragged, 4);
}

TEST(MoeArgs, ValidationNamesTheArgument) {
  MoeGemmArgs a;
  a.E = 2, a.K = 100, a.N = 256, a.rows_total = 0;
  int dummy[4];
  a.offs = reinterpret_cast<const int32_t*>(dummy);
  auto msg = [&] {
    try {
      validate_moe_gemm_args(a);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(msg().find("K"), std::string::npos);
  a.K = 128, a.N = 200;
  EXPECT_NE(msg().find("N"), std::string::npos);
  a.N = 384, a.tile = MoeTile(9);
  EXPECT_NE(msg().find("tile 9: unknown"), std::string::npos) << msg();
  a.tile = MoeTile::m128n128, a.out_store = MoeOutStore(7);
  EXPECT_NE(msg().find("out_store"), std::string::npos);
  a.out_store = MoeOutStore::tile_bulk, a.workspace = reinterpret_cast<char*>(dummy) + 4;
  EXPECT_NE(msg().find("workspace"), std::string::npos);
  a.workspace = nullptr;
  EXPECT_EQ(msg(), "");
  // The 64 x 80 tile: L2 only, the staged store only (any N: its last n-block may be partial).
  a.tile = MoeTile::m64n80, a.kind = MoeGemmKind::l1_swiglu;
  EXPECT_NE(msg().find("L2 only"), std::string::npos) << msg();
  a.kind = MoeGemmKind::l2;
  EXPECT_NE(msg().find("staged store only"), std::string::npos) << msg();
  a.out_store = MoeOutStore::warp_staged;
  EXPECT_EQ(msg(), "");
  // The ping-pong tile: both GEMMs, the staged store only, no split-K.
  a.tile = MoeTile::m128n128pp, a.kind = MoeGemmKind::l1_swiglu;
  EXPECT_EQ(msg(), "");
  a.out_store = MoeOutStore::warp_tma;
  EXPECT_NE(msg().find("m128n128pp with out_store tma: built with the staged store only"), std::string::npos)
      << msg();
  a.out_store = MoeOutStore::automatic, a.splits = 2;
  EXPECT_NE(msg().find("m128n128pp with 2 splits: built without split-K"), std::string::npos) << msg();
  a.splits = 1;
  EXPECT_EQ(msg(), "");
}

namespace {
// validate_moe_gemm_args' message for these arguments ("" when they pass).
std::string validation_message(const MoeGemmArgs& a) {
  try {
    validate_moe_gemm_args(a);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Arguments that pass every check but the shape's: 16-byte aligned stand-ins
// for device pointers (validation never dereferences them).
MoeGemmArgs args_of(MoeGemmKind kind, int rows, int K, int N, int E) {
  alignas(16) static char fake[64];
  MoeGemmArgs a;
  a.kind = kind, a.a = fake, a.b = fake, a.c = fake, a.offs = reinterpret_cast<const int32_t*>(fake);
  a.rows_total = rows, a.K = K, a.N = N, a.E = E;
  return a;
}
}  // namespace

// What torch._grouped_mm takes for these GEMMs: K a multiple of 8, N of 16
// (whatever the tile), any rows and experts; refused otherwise, naming the
// argument and what was expected.
TEST(MoeArgs, AcceptsTheShapesTorchGroupedMmTakes) {
  for (MoeGemmKind kind : {MoeGemmKind::l1_swiglu, MoeGemmKind::l2}) {
    for (int N : {16, 48, 272, 400, 2800, 2880, 4096})
      for (int K : {8, 24, 72, 136, 1400, 2880})
        for (MoeTile t :
             {MoeTile::automatic, MoeTile::m128n256, MoeTile::m64n256, MoeTile::m128n128, MoeTile::m128n128pp}) {
          MoeGemmArgs a = args_of(kind, 300, K, N, 3);
          a.tile = t;
          EXPECT_EQ(validation_message(a), "") << N << " " << K << " " << to_string(t);
        }
    for (int E : {1, 2, 300, 4096}) EXPECT_EQ(validation_message(args_of(kind, 0, 8, 16, E)), "") << E;
    for (int rows : {0, 1, 77}) EXPECT_EQ(validation_message(args_of(kind, rows, 8, 16, 2)), "") << rows;
    for (int N : {0, -16, 8, 24, 200, 2888}) {
      const std::string m = validation_message(args_of(kind, 300, 64, N, 3));
      EXPECT_NE(m.find("N"), std::string::npos) << m;
      EXPECT_NE(m.find("expected a positive multiple of 16, got " + std::to_string(N)), std::string::npos) << m;
    }
    for (int K : {0, -8, 4, 12, 100}) {
      const std::string m = validation_message(args_of(kind, 300, K, 64, 3));
      EXPECT_NE(m.find("K: expected a positive multiple of 8"), std::string::npos) << m;
    }
    EXPECT_NE(validation_message(args_of(kind, 300, 64, 64, 0)).find("E (experts): expected >= 1"),
              std::string::npos);
  }
  MoeGemmArgs narrow = args_of(MoeGemmKind::l2, 300, 72, 272, 3);
  narrow.tile = MoeTile::m64n80;
  EXPECT_EQ(validation_message(narrow), "");
  EXPECT_NE(validation_message(args_of(MoeGemmKind::l1_swiglu, 300, 64, 40, 3)).find("2I"), std::string::npos);
}

// Partial n-blocks count as tiles: split-K's workspace (counts, then 256
// bytes on the partials of every tile there may be) is sized with N / BLOCK_N
// rounded up; only the counts need zeroes.
TEST(MoeArgs, SplitWorkspaceCountsThePartialNBlock) {
  MoeGemmArgs a = args_of(MoeGemmKind::l2, 300, 1400, 2880, 3);
  a.tile = MoeTile::m128n256, a.splits = 2;
  const int64_t tiles = (300 / 128 + 3) * ((2880 + 255) / 256);  // 5 x 12
  EXPECT_EQ(moe_workspace_bytes(a), size_t(256 + tiles * 2 * 128 * 256 * 4));
  EXPECT_EQ(moe_workspace_zeroed_bytes(a), size_t(tiles * 4));
  a.N = 16, a.tile = MoeTile::m128n128;
  EXPECT_EQ(moe_workspace_bytes(a), size_t(256 + 5 * 2 * 128 * 128 * 4));
  EXPECT_EQ(moe_workspace_zeroed_bytes(a), size_t(5 * 4));
  a.splits = 1;  // and no tail split: whole tiles only
  EXPECT_EQ(moe_workspace_bytes(a), 0u);
  EXPECT_EQ(moe_workspace_zeroed_bytes(a), 0u);
}

TEST(MoeArgs, TailSplitsAreCheckedBeforeLaunch) {
  MoeGemmArgs a = args_of(MoeGemmKind::l2, 300, 1400, 2880, 3);  // 22 k-blocks
  a.tile = MoeTile::m128n256, a.tail_splits = 23;
  EXPECT_NE(validation_message(a).find("tail_splits: expected 0 (automatic) to ceil(K / 64) = 22, got 23"),
            std::string::npos);
  a.tail_splits = -1;
  EXPECT_NE(validation_message(a).find("tail_splits"), std::string::npos);
  a.tail_splits = 4, a.splits = 2;
  EXPECT_NE(validation_message(a).find("tail_splits 4 with splits 2"), std::string::npos);
  a.splits = 1;
  EXPECT_EQ(validation_message(a), "");
  a.tile = MoeTile::m128n128pp;
  EXPECT_NE(validation_message(a).find("m128n128pp with tail_splits 4"), std::string::npos);
}

// The tail split's layout: every item of the walk maps to a tile and a k
// range such that each tile of the launch is covered exactly once by its
// ranges, items of the first wave are whole tiles, split tiles have their
// own slots below the grid, and only a tail of at most half the grid splits.
TEST(MoeTailSplit, EveryTileIsCoveredOnceAndOnlyTheShortTailSplits) {
  using namespace xstage::sched;
  for (int grid : {1, 2, 7, 132})
    for (int tiles = 0; tiles <= 5 * grid + 3; ++tiles)
      for (int cap : {1, 2, 3, 8}) {
        const TailSplitLayout l = tail_split_layout(tiles, grid, cap);
        const int waves = tiles / std::max(grid, 1), r = tiles % std::max(grid, 1);
        const bool split = waves >= 1 && r > 0 && 2 * r <= grid && cap >= 2;
        ASSERT_EQ(l.splits > 1, split) << grid << " " << tiles << " " << cap;
        if (split) {
          EXPECT_EQ(l.whole, waves * grid);
          EXPECT_EQ(l.splits, std::min(grid / r, cap));
        }
        std::vector<int> seen(size_t(tiles), 0), slot_seen(size_t(grid), 0);
        for (int t = 0; t < (waves + 2) * grid; ++t) {  // past the end too
          const TailSplitItem i = tail_split_item(t, l);
          if (t < grid) EXPECT_EQ(i.splits, 1) << t;
          if (i.tile >= tiles) continue;
          ASSERT_GE(i.tile, 0);
          ASSERT_LT(i.split, i.splits);
          seen[size_t(i.tile)] |= 1 << i.split;
          if (i.splits > 1) {
            ASSERT_LT(i.slot * i.splits + i.split, grid);  // one grid of partials
            slot_seen[size_t(i.slot * i.splits + i.split)]++;
          }
        }
        for (int t = 0; t < tiles; ++t) {
          const int ways = t >= l.whole ? l.splits : 1;
          EXPECT_EQ(seen[size_t(t)], (1 << ways) - 1) << grid << " " << tiles << " " << cap << " tile " << t;
        }
        for (int c : slot_seen) EXPECT_LE(c, 1);
      }
}

TEST(MoeTailSplit, TheCapGrowsWithKAndStaysOffWhereSplitKPlans) {
  // Many tiles (Qwen3-30B-like L1 at 4096 rows an expert): the cap from K.
  const int rows = 4096 * 8;
  EXPECT_EQ(moe_pick_tail_splits(rows, 8, 1536, 256, MoeTile::m128n256, 132), 1);   // 4 k-blocks
  EXPECT_EQ(moe_pick_tail_splits(rows, 8, 1536, 4032, MoeTile::m128n256, 132), 1);  // 63: below the threshold
  EXPECT_EQ(moe_pick_tail_splits(rows, 8, 1536, 4096, MoeTile::m128n256, 132), 6);  // 64: sqrt(64 / 1.5)
  EXPECT_EQ(moe_pick_tail_splits(rows, 8, 1536, 7168, MoeTile::m128n256, 132), 8);  // 112
  int prev = 1;
  for (int K = 64; K <= 16384; K += 64) {
    const int cap = moe_pick_tail_splits(rows, 8, 1536, K, MoeTile::m128n256, 132);
    EXPECT_GE(cap, prev) << K;
    EXPECT_LE(cap, (K + 63) / 64) << K;
    prev = cap;
  }
  // Few tiles: split-K's regime, no tail split; the ping-pong tile has none.
  EXPECT_EQ(moe_pick_tail_splits(128, 2, 1536, 7168, MoeTile::m128n256, 132), 1);
  EXPECT_EQ(moe_pick_tail_splits(rows, 8, 1536, 7168, MoeTile::m128n128pp, 132), 1);
}

TEST(MoeTiles, NoMultipleOfTheTileWidthCountsTheLastNBlockAsATile) {
  // Many experts: the tiles fill the SMs, no split.
  EXPECT_EQ(moe_pick_splits(128 * 64, 64, 2880, 1400, MoeTile::m128n256, 132), 1);
  // Up to 64 rows an expert, 64 x 256 where it pads N no more than 128-wide tiles: 3008 pads to 3072 either
  // way. 2880 pads to 3072 against 2944: the cost model, which takes 64 x 256 too here (64 experts: 768 tiles
  // in 6 waves, against 1472 of 128 x 128 in 12).
  EXPECT_EQ(moe_pick_tile(64 * 64, 64, 3008, 2048, 132), MoeTile::m64n256);
  EXPECT_EQ(moe_pick_tile(64 * 64, 64, 2880, 2048, 132), MoeTile::m64n256);
  // Many rows on many experts: the big tile, as on the model shapes.
  EXPECT_EQ(moe_pick_tile(64 * 1024, 64, 2880, 1400, 132), MoeTile::m128n256);
}

TEST(MoeArgs, TileNames) {
  for (MoeTile t : {MoeTile::automatic, MoeTile::m128n256, MoeTile::m64n256, MoeTile::m128n128, MoeTile::m64n80,
                    MoeTile::m128n128pp})
    EXPECT_EQ(parse_moe_tile(to_string(t)), t);
  EXPECT_THROW(parse_moe_tile("m64n64"), Error);
}

TEST(MoeArgs, AutomaticOutStore) {
  EXPECT_EQ(moe_pick_out_store(MoeGemmKind::l2, MoeTile::m128n256), MoeOutStore::warp_tma);
  for (MoeTile t : {MoeTile::m64n256, MoeTile::m128n128, MoeTile::m64n80, MoeTile::m128n128pp})
    EXPECT_EQ(moe_pick_out_store(MoeGemmKind::l2, t), MoeOutStore::warp_staged) << to_string(t);
  EXPECT_EQ(moe_pick_out_store(MoeGemmKind::l1_swiglu, MoeTile::m128n256), MoeOutStore::warp_staged);
}

TEST(MoeArgs, OutStoreNames) {
  for (MoeOutStore s :
       {MoeOutStore::automatic, MoeOutStore::warp_staged, MoeOutStore::tile_bulk, MoeOutStore::warp_tma})
    EXPECT_EQ(parse_moe_out_store(to_string(s)), s);
  EXPECT_THROW(parse_moe_out_store("tensor"), Error);
}

TEST(MoeCli, BadArgumentsFailBeforeTheGpu) {
  for (const char* args : {"moe-gemm --model nope", "moe-gemm --model deepseek-v3 --ep 3",
                           "moe-gemm --hidden 100 --inter 64 --experts 2", "moe-gemm --model mixtral-8x7b --tile-l1 x",
                           "moe-gemm --model hidream-i1 --gemm l2 --routing-weights", "moe-gemm --counts 1,-2 --hidden 256 --inter 64",
                           "moe-gemm --model hidream-i1 --out-store fast",
                           "moe-gemm --hidden 2888 --inter 64 --experts 2",  // 2888: no multiple of 16
                           "moe-gemm --hidden 2880 --inter 1404 --experts 2",  // 1404: no multiple of 8
                           "moe-gemm --hidden 0 --inter 8 --experts 2"}) {
    const CliRun r = run_cli(args);
    EXPECT_EQ(r.rc, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("expected"), std::string::npos) << args << "\n" << r.out;
  }
}

// --model takes the layer's table (xstage moe's --shape names): one list for
// both commands, which the error names.
TEST(MoeCli, ModelNamesAreTheLayersShapes) {
  const CliRun bad = run_cli("moe-gemm --model nope");
  EXPECT_EQ(bad.rc, 2) << bad.out;
  for (const MoeShape& k : moe_known_shapes()) EXPECT_NE(bad.out.find(k.name), std::string::npos) << bad.out;
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU would run the model shapes";
  for (const char* args : {"moe-gemm --model deepseek-v4-flash", "moe-gemm --model qwen3-235b-a22b"}) {
    const CliRun r = run_cli(args);
    EXPECT_NE(r.out.find("no CUDA device"), std::string::npos) << args << "\n" << r.out;
  }
}

// Shapes no tile width divides pass the argument checks: without a GPU the
// command then stops at the missing device, not at --hidden or --inter.
TEST(MoeCli, TailShapesPassTheChecks) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU runs these (tests/gpu/test_moe_gemm.cpp, MoeGemmCli tail_*)";
  for (const char* args : {"moe-gemm --hidden 2880 --inter 1400 --experts 2",
                           "moe-gemm --hidden 16 --inter 8 --counts 0,3",
                           "moe-gemm --hidden 272 --inter 136 --experts 300 --rows-per-expert 1"}) {
    const CliRun r = run_cli(args);
    EXPECT_NE(r.rc, 0) << args;
    EXPECT_EQ(r.out.find("--hidden"), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(r.out.find("--inter"), std::string::npos) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("no CUDA device"), std::string::npos) << args << "\n" << r.out;
  }
}
