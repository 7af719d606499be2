// The grouped GEMMs on the shapes torch._grouped_mm takes that no tile width
// divides: N a multiple of 16 (the last n-block of each expert partial, its
// columns past N computed from the next expert's B rows and left out of
// every store), K a multiple of 8 (the last k-block zero-filled past K, K
// shorter than one k-block included), experts of 0, 1 and odd row counts,
// one expert and 300. Every tile, every output store, split-K (the library's
// workspace and the caller's), and the automatic choice; every element of
// the output against the fp64 reference, rows past the last expert and a
// guard past the output still poisoned (moe_gemm_problem.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "device/sched/tail_split.hpp"
#include "gpu/moe_gemm_problem.hpp"
#include "gpu/need_gpus.hpp"
#include "xstage/moe/moe.hpp"

using namespace xstage;
using gpu_tests::MoeGemmProblem;
using gpu_tests::MoeProblemShape;
using gpu_tests::MoeRunConfig;

namespace {

struct TailCase {
  std::string name;
  MoeGemmKind kind;
  MoeProblemShape shape;
};

std::vector<int> many_ragged_experts(int E) {
  std::vector<int> c(E);
  for (int e = 0; e < E; ++e) c[e] = e % 7 == 0 ? 0 : (e * 37) % 11;
  return c;
}

// The same row counts for L1 and L2 where the shape suits both: L1's N is 2I
// (I = N / 2 output columns, a multiple of 8), L2's N its output width.
std::vector<TailCase> tail_cases() {
  struct Shape {
    const char* name;
    MoeProblemShape shape;
  };
  const Shape both[] = {
      {"n16_k8", {{5, 0, 17, 1}, 7, 8, 16}},             // one k-block of 8 columns; N below every tile width
      {"n48_k24", {{0, 33, 64, 129, 0, 2}, 3, 24, 48}},  // a 64 x 256 tile's second warpgroup wholly past N
      {"n272_k72", {{70, 0, 130, 1}, 9, 72, 272}},       // 256 + 16 columns; 64 + 8 of K
      {"n400_k1400", {{3, 140, 0, 65}, 0, 1400, 400}},   // the last row an expert's: a spill past N hits the guard
      {"e1_n112_k136", {{200}, 0, 136, 112}},            // one expert
      {"e300_n80_k40", {many_ragged_experts(300), 5, 40, 80}},
  };
  std::vector<TailCase> cases;
  for (const Shape& s : both) {
    cases.push_back({std::string("L1_") + s.name, MoeGemmKind::l1_swiglu, s.shape});
    cases.push_back({std::string("L2_") + s.name, MoeGemmKind::l2, s.shape});
  }
  // A model with hidden 2880 and an expert intermediate size of 1400: L1 K = 2880 (45 k-blocks), N = 2800
  // (10 256-column n-blocks and 240 columns); L2 K = 1400 (21 k-blocks and 56 columns), N = 2880.
  const std::vector<int> counts = {0, 61, 1, 38};
  cases.push_back({"L1_hidden2880_inter1400", MoeGemmKind::l1_swiglu, {counts, 4, 2880, 2800}});
  cases.push_back({"L2_hidden2880_inter1400", MoeGemmKind::l2, {counts, 4, 1400, 2880}});
  return cases;
}

// Forced tiles and stores, without and with split-K where K has k-blocks to
// split; the 64 x 80 tile where it is built (L2, staged); the automatic
// choice; split-K with the caller's workspace.
std::vector<MoeRunConfig> run_configs(MoeGemmKind kind, int K) {
  const int k_blocks = (K + 63) / 64;
  std::vector<int> splits = {1};
  if (k_blocks >= 2) splits.push_back(std::min(3, k_blocks));
  std::vector<MoeRunConfig> configs;
  for (MoeOutStore store : {MoeOutStore::warp_staged, MoeOutStore::tile_bulk, MoeOutStore::warp_tma})
    for (MoeTile tile : {MoeTile::m128n256, MoeTile::m64n256, MoeTile::m128n128})
      for (int s : splits) configs.push_back({tile, s, store});
  if (kind == MoeGemmKind::l2)
    for (int s : splits) configs.push_back({MoeTile::m64n80, s, MoeOutStore::warp_staged});
  configs.push_back({});
  if (k_blocks >= 2) configs.push_back({MoeTile::m128n128, splits.back(), MoeOutStore::tile_bulk, true});
  return configs;
}

class MoeGemmTails : public ::testing::TestWithParam<TailCase> {};

TEST_P(MoeGemmTails, EveryTileStoreAndSplitMatchesTheReference) {
  XSTAGE_NEED_GPUS(1);
  const TailCase& c = GetParam();
  MoeGemmProblem problem(c.kind, c.shape);
  for (const MoeRunConfig& cfg : run_configs(c.kind, c.shape.K)) {
    SCOPED_TRACE(cfg.describe());
    problem.run_and_check(cfg);
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoeGemmTails, ::testing::ValuesIn(tail_cases()),
                         [](const auto& info) { return info.param.name; });

// The tail split: row counts that give a launch of the tile about `waves`
// grids of tiles plus `tail` (sched/tail_split.hpp), ragged experts, one of
// them empty, rows past the last; N = 272 (a partial n-block) and K = 712
// (12 k-blocks, the last partial).
MoeProblemShape tail_shape(MoeTile tile, int sms, int waves, int tail) {
  const int bm = moe_tile_block_m(tile), bn = moe_tile_block_n(tile), N = 272, n_blocks = (N + bn - 1) / bn;
  const int m_blocks = (waves * sms + tail + n_blocks - 1) / n_blocks;
  std::vector<int> counts;
  int left = m_blocks;
  for (int e = 0; left > 0; ++e) {
    const int m = e == 2 ? 0 : std::min(left, 1 + e * 3);
    counts.push_back(m == 0 ? 0 : (m - 1) * bm + 1 + (e * 37) % bm);
    left -= m;
  }
  return {counts, 3, 712, N};
}

int device_sms() {
  int dev = 0, sms = 0;
  EXPECT_EQ(cudaGetDevice(&dev), cudaSuccess);
  EXPECT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  return sms;
}

// The layout the kernel will work out for this problem (the launch's grid: one CTA an SM here).
sched::TailSplitLayout expected_layout(const MoeProblemShape& s, MoeTile tile, int sms, int cap) {
  const int bm = moe_tile_block_m(tile), bn = moe_tile_block_n(tile);
  int tiles = 0;
  for (int c : s.counts) tiles += (c + bm - 1) / bm * ((s.N + bn - 1) / bn);
  return sched::tail_split_layout(tiles, sms, std::min(cap, (s.K + 63) / 64));
}

// Every tile built with split-K, a short tail (r = grid / 8: each of its
// tiles split 8 ways, capped at 2 or at the 12 k-blocks), both GEMMs, every
// output store, the library's workspace and the caller's; and for the wide
// tile, tails the kernel must leave whole: one tile past two grids (split as
// far as the cap), three quarters of a grid (not split).
TEST(MoeGemmTailSplit, TheLastWavesSplitTilesMatchTheReference) {
  XSTAGE_NEED_GPUS(1);
  const int sms = device_sms();
  for (MoeGemmKind kind : {MoeGemmKind::l1_swiglu, MoeGemmKind::l2}) {
    std::vector<MoeTile> tiles = {MoeTile::m128n256, MoeTile::m64n256, MoeTile::m128n128};
    if (kind == MoeGemmKind::l2) tiles.push_back(MoeTile::m64n80);
    for (MoeTile tile : tiles) {
      const MoeProblemShape shape = tail_shape(tile, sms, 1, std::max(1, sms / 8));
      SCOPED_TRACE(std::string(kind == MoeGemmKind::l2 ? "L2 " : "L1 ") + to_string(tile));
      ASSERT_GT(expected_layout(shape, tile, sms, 12).splits, 1) << "the shape must give a tail to split";
      MoeGemmProblem problem(kind, shape);
      std::vector<MoeOutStore> stores = {MoeOutStore::warp_staged};
      if (tile != MoeTile::m64n80) stores.insert(stores.end(), {MoeOutStore::tile_bulk, MoeOutStore::warp_tma});
      for (MoeOutStore store : stores)
        for (int cap : {2, 12}) {
          MoeRunConfig cfg{tile, 0, store};
          cfg.tail_splits = cap;
          SCOPED_TRACE(cfg.describe());
          problem.run_and_check(cfg);
          if (HasFatalFailure()) return;
        }
      MoeRunConfig caller{tile, 1, MoeOutStore::warp_staged, true};
      caller.tail_splits = 12;
      problem.run_and_check(caller);
      if (HasFatalFailure()) return;
    }
  }
  for (auto [waves, tail] : {std::pair{2, 1}, std::pair{1, 3 * sms / 4}}) {
    const MoeProblemShape shape = tail_shape(MoeTile::m128n256, sms, waves, tail);
    const sched::TailSplitLayout l = expected_layout(shape, MoeTile::m128n256, sms, 12);
    EXPECT_EQ(l.splits > 1, tail <= sms / 2) << waves << " waves and " << tail;
    MoeGemmProblem problem(MoeGemmKind::l2, shape);
    MoeRunConfig cfg{MoeTile::m128n256, 0, MoeOutStore::warp_tma};
    cfg.tail_splits = 12;
    problem.run_and_check(cfg);
  }
}

// No rows at all (every expert empty, or no expert has a row and rows belong
// to none): nothing is launched or stored.
TEST(MoeGemmTailsEmpty, ExpertsWithoutRowsStoreNothing) {
  XSTAGE_NEED_GPUS(1);
  for (MoeGemmKind kind : {MoeGemmKind::l1_swiglu, MoeGemmKind::l2}) {
    MoeGemmProblem none(kind, {{0, 0, 0}, 0, 24, 48});
    none.run_and_check({});
    MoeGemmProblem past(kind, {{0, 0}, 17, 24, 48});
    past.run_and_check({MoeTile::m128n256, 1, MoeOutStore::warp_tma});
    past.run_and_check({MoeTile::m64n256, 1, MoeOutStore::tile_bulk});
  }
}

}  // namespace
