// The tile heuristic and the W13 layout: CPU only (tested without a GPU).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "xstage/moe/moe.hpp"

namespace xstage {

namespace {
struct Shape {
  MoeTile tile;
  int bm, bn;
};
// Larger tiles first: ties go to them (more reuse of each loaded operand row).
constexpr Shape kShapes[] = {{MoeTile::m128n256, 128, 256},
                             {MoeTile::m128n128, 128, 128},
                             {MoeTile::m64n256, 64, 256},
                             {MoeTile::m64n80, 64, 80},
                             {MoeTile::m128n128pp, 128, 128}};
// Tiles a rule below may pick by itself: all but the ping-pong one, which is
// chosen apart (short K) and has no split-K.
bool cost_ranked(MoeTile t) { return t != MoeTile::m128n128pp; }
Shape shape_of(MoeTile t) {
  for (const Shape& s : kShapes)
    if (s.tile == t) return s;
  return {t, 0, 0};
}

// An expert's n-blocks: the last one partial where bn does not divide N (its
// columns past N are computed, not stored: a full tile's cost).
int64_t n_blocks(int N, int bn) { return (int64_t(N) + bn - 1) / bn; }

int64_t expected_tiles(double rows_per_expert, int E, int N, const Shape& s) {
  return int64_t(E) * int64_t(std::ceil(rows_per_expert / s.bm)) * n_blocks(N, s.bn);
}

// The wide tiles: up to 64 rows an expert the 64-row tile (it computes no
// padded rows: fastest in every model shape of the sweep at 64 rows, few
// experts included, docs/design/moe.md) when its 256 columns pad N no more
// than 128 would (N % 256 is 0 or above 128: 128 x 128 tiles would then
// compute as many padded columns and twice the rows), else the cheapest by
// the cost model, which counts a partial tile as a full one.
MoeTile pick_wide(double rows_per_expert, int E, int N, int sm_count) {
  if (rows_per_expert <= 64 && n_blocks(N, 256) * 256 <= n_blocks(N, 128) * 128) return MoeTile::m64n256;
  MoeTile best = MoeTile::m128n128;
  double best_cost = -1;
  for (const Shape& s : kShapes) {
    if (s.tile == MoeTile::m64n80 || !cost_ranked(s.tile)) continue;
    const int64_t waves = (expected_tiles(rows_per_expert, E, N, s) + sm_count - 1) / std::max(sm_count, 1);
    const double cost = double(waves) * (double(s.bm) * s.bn + 64.0 * (s.bm + s.bn));
    if (best_cost < 0 || cost < best_cost) best = s.tile, best_cost = cost;
  }
  return best;
}

// Few tiles: the 128 x 256 tiles at the mean rows fill at most half the SMs.
// There neither the HBM nor the tensor cores are kept busy, and the tile and
// the split-K factor are chosen together by a cost model (below); elsewhere
// the wide tile and no split.
bool few_tiles(double rows_per_expert, int E, int N, int sm_count) {
  return 2 * expected_tiles(rows_per_expert, E, N, shape_of(MoeTile::m128n256)) <= sm_count;
}

// The few-tile cost model, in microseconds on an H200, fitted by
// bench/fit_moe_split_rule.py to the split study of every tile and split
// forced on the development grid's 47 few-tile cells
// (results/h200/moe/split-study/: the fit, its terms, how well it chooses).
// m_blocks x n-blocks x splits work items of kb k-blocks each in w waves: a
// fixed cost an item and a k-block, the operand loads of a k-block (slower a
// CTA as more CTAs load), its tensor-core work, split-K's fixed cost and
// partial bytes, the epilogue.
double few_tile_cost(int64_t m_blocks, int N, int K, const Shape& s, int splits, int sm_count) {
  constexpr double c[7] = {0.474, 0.09724, 0.163, 0.5072, 6.008, 15.89, 4.538};
  const double items = double(m_blocks) * double(n_blocks(N, s.bn)) * splits;
  const double kb = std::ceil(std::ceil(K / 64.0) / splits);
  const double w = std::ceil(items / sm_count);
  const double busy = std::min(items, double(sm_count)) / sm_count;
  const double area = double(s.bm) * s.bn / 32768.0;
  const double split = splits > 1 ? 1.0 : 0.0;
  return c[0] * w + c[1] * w * kb + c[2] * w * kb * (s.bm + s.bn) / 256.0 * busy + c[3] * w * kb * area +
         c[4] * split + c[5] * split * items * area / sm_count + c[6] * w * area;
}

// The expected cost: 0.7 of the cost at the mean rows plus 0.3 of it at
// skewed counts, one more m-block an expert than the mean gives (E - 1 in
// all). The host knows the mean only, and a split that fills one wave at the
// mean spills into a second where the counts are skewed. Why 0.3:
// bench/fit_moe_split_rule.py's docstring.
double expected_cost(double rows_per_expert, int E, int N, int K, const Shape& s, int splits, int sm_count) {
  const int64_t mean = int64_t(E) * int64_t(std::ceil(rows_per_expert / s.bm));
  constexpr double skewed = 0.3;
  return (1 - skewed) * few_tile_cost(mean, N, K, s, splits, sm_count) +
         skewed * few_tile_cost(mean + E - 1, N, K, s, splits, sm_count);
}

struct Plan {
  MoeTile tile;
  int splits;
};
// The cheapest allowed (tile, splits) by the cost model; `only` restricts the
// tile (automatic: every tile built for the GEMM; m64n80 where `narrow`).
Plan few_tile_plan(double rows_per_expert, int E, int N, int K, int sm_count, bool narrow, MoeTile only) {
  Plan best{MoeTile::m128n256, 1};
  double best_cost = -1;
  for (const Shape& s : kShapes) {
    if (only != MoeTile::automatic ? s.tile != only : (s.tile == MoeTile::m64n80 && !narrow) || !cost_ranked(s.tile))
      continue;
    const int max_splits = s.tile == MoeTile::m128n128pp ? 1 : std::min(kMoeMaxSplits, (K + 63) / 64);
    for (int splits = 1; splits <= max_splits; ++splits) {
      const double cost = expected_cost(rows_per_expert, E, N, K, s, splits, sm_count);
      if (best_cost < 0 || cost < best_cost) best = {s.tile, splits}, best_cost = cost;
    }
  }
  return best;
}

// One wave of 128 x 256 tiles at the mean rows (more than half the SMs, at
// most all): skewed counts spill them into a second wave, as the host cannot
// see. 128 x 128 tiles halve what spills. The split study's one-wave band
// (32 cell-GEMMs of 2 to 32 experts above 64 rows, drawn and table,
// results/h200/moe/split-study/): against the 128 x 256 tile, 0.970x
// geomean on uniform counts (worst cell 0.917x) and 1.151x on Zipf-skewed
// ones (the lowest torch / ours from 0.925x to 1.108x). One expert has no
// skew: the wide rule stands there.
bool skew_spills_one_wave(double rows_per_expert, int E, int N, int sm_count) {
  return E > 1 && rows_per_expert > 64 &&
         expected_tiles(rows_per_expert, E, N, shape_of(MoeTile::m128n256)) <= sm_count;
}
}  // namespace

MoeTile moe_pick_tile(int rows_total, int E, int N, int K, int sm_count, bool narrow) {
  const double rows_per_expert = E > 0 ? double(rows_total) / E : 0;
  if (E > 0 && N > 0 && K > 0 && sm_count > 0 && few_tiles(rows_per_expert, E, N, sm_count))
    return few_tile_plan(rows_per_expert, E, N, K, sm_count, narrow, MoeTile::automatic).tile;
  if (skew_spills_one_wave(rows_per_expert, E, N, sm_count)) return MoeTile::m128n128;
  return pick_wide(rows_per_expert, E, N, sm_count);
}

int moe_pick_splits(int rows_total, int E, int N, int K, MoeTile tile, int sm_count) {
  if (E < 1 || N < 1 || K < 1 || sm_count < 1 || shape_of(tile).bn == 0) return 1;
  const double rows_per_expert = double(rows_total) / E;
  if (!few_tiles(rows_per_expert, E, N, sm_count)) return 1;
  return few_tile_plan(rows_per_expert, E, N, K, sm_count, true, tile).splits;
}

namespace {
// The tail split's cap. A split tile of s ways costs about kb / s k-blocks
// of compute, plus its partial's write and, in the tile's last CTA, the s
// partials' reads: each partial is the tile in fp32, whose round trip
// through L2 takes about as long as kTailRoundTrip k-blocks on the same tile
// (both scale with the tile's area). kb / s + kTailRoundTrip (1 + s) is
// least at s = sqrt(kb / kTailRoundTrip). That model put the break-even near
// 8 k-blocks; measured (bench/moe_tail_study.py, two runs over the grid's
// 1-16-wave GEMMs, docs/perf-log.md M4) a split pays only from 64 k-blocks
// (K >= 4096: whole / split 1.04x geomean over 35 GEMMs), is level at 48-63
// and loses below (0.87-0.96x): in that study the split kernel's whole tiles
// ran ~3% slower than the plain kernel's (a cost M5 removed, so the
// threshold may be too high now), and a split costs ~5-10 us more than the
// model says. So
// kTailMinKBlocks = 64; the caps forced at 2, 4 and 8 there were within the
// protocol's noise of the sqrt rule's.
constexpr double kTailRoundTrip = 1.5;
constexpr int kTailMinKBlocks = 64, kTailMaxSplits = 8;
int tail_cap(int k_blocks) {
  if (k_blocks < kTailMinKBlocks) return 1;
  const int s = int(std::sqrt(k_blocks / kTailRoundTrip));
  return std::clamp(s, 1, std::min(kTailMaxSplits, k_blocks));
}
}  // namespace

int moe_pick_tail_splits(int rows_total, int E, int N, int K, MoeTile tile, int sm_count) {
  if (E < 1 || N < 1 || K < 1 || sm_count < 1 || shape_of(tile).bn == 0 || tile == MoeTile::m128n128pp) return 1;
  if (few_tiles(double(rows_total) / E, E, N, sm_count)) return 1;  // split-K's regime (moe_pick_splits)
  return tail_cap((K + 63) / 64);
}

MoeOutStore moe_pick_out_store(MoeGemmKind kind, MoeTile tile) {
  // L2 on 128 x 256 tiles: the TMA tensor store returns each warp to the
  // mainloop before its 32 KiB of output reach memory, which a tile of the
  // short-K L2 shapes (K = 768-2048, 12-32 k-blocks) notices: 1.008x of
  // staged (geomean of 18 cells at 128-512 rows, 16 of them >= 1.0x),
  // neutral at long K. On 128 x 128 tiles, and in L1 (half the output), it
  // is level or slower (docs/perf-log.md, MoE 10 and 11).
  return kind == MoeGemmKind::l2 && tile == MoeTile::m128n256 ? MoeOutStore::warp_tma : MoeOutStore::warp_staged;
}

void moe_interleave_w13(const uint16_t* src, uint16_t* dst, int E, int I, int K) {
  for (int e = 0; e < E; ++e)
    for (int r = 0; r < 2 * I; ++r)
      std::memcpy(dst + (int64_t(e) * 2 * I + r) * K, src + (int64_t(e) * 2 * I + moe_w13_source_row(r, I)) * K,
                  size_t(K) * 2);
}

void moe_reference_row(const float* a, const float* b, int K, int N, double* out) {
  for (int n = 0; n < N; ++n) {
    const float* bn = b + int64_t(n) * K;
    double s = 0;
    for (int k = 0; k < K; ++k) s += double(a[k]) * double(bn[k]);
    out[n] = s;
  }
}

void moe_reference_swiglu(const double* gu, int I, double weight, double* out) {
  for (int i = 0; i < I; ++i) {
    const int j = i / 8, q = i % 8;
    const double gate = gu[16 * j + q], up = gu[16 * j + 8 + q];
    out[i] = gate / (1.0 + std::exp(-gate)) * up * weight;
  }
}

}  // namespace xstage
