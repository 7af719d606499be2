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
                             {MoeTile::m64n80, 64, 80}};
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
    if (s.tile == MoeTile::m64n80) continue;
    const int64_t waves = (expected_tiles(rows_per_expert, E, N, s) + sm_count - 1) / std::max(sm_count, 1);
    const double cost = double(waves) * (double(s.bm) * s.bn + 64.0 * (s.bm + s.bn));
    if (best_cost < 0 || cost < best_cost) best = s.tile, best_cost = cost;
  }
  return best;
}
}  // namespace

MoeTile moe_pick_tile(int rows_total, int E, int N, int sm_count, bool narrow) {
  const double rows_per_expert = E > 0 ? double(rows_total) / E : 0;
  const MoeTile wide = pick_wide(rows_per_expert, E, N, sm_count);
  // Few long experts: when the wide tiles leave at least half the SMs idle
  // (where split-K would start), the 64 x 80 tile puts more CTAs on the weight
  // stream with fewer split-K partials or none, as long as its tiles fit one
  // wave (they are split as any tile, moe_pick_splits)
  // (HiDream-I1 P = 2 L2 at 64 and 128 rows an expert: 1.35-1.45x torch
  // against 0.94-1.15x for the wide tiles with or without splits; at 256
  // rows, 80 tiles of 128 x 128, it is slower: docs/design/moe.md).
  // (Only where 80 divides N: the tuned case; elsewhere untried.)
  const Shape n = shape_of(MoeTile::m64n80);
  if (narrow && N % n.bn == 0 && E > 0 && sm_count > 0) {
    const int64_t wide_tiles = expected_tiles(rows_per_expert, E, N, shape_of(wide));
    const int64_t narrow_tiles = expected_tiles(rows_per_expert, E, N, n);
    if (2 * wide_tiles <= sm_count && narrow_tiles > wide_tiles && narrow_tiles <= sm_count) return MoeTile::m64n80;
  }
  return wide;
}

int moe_pick_splits(int rows_total, int E, int N, int K, MoeTile tile, int sm_count) {
  const Shape s = shape_of(tile);
  const int bm = s.bm, bn = s.bn;
  if (E < 1 || bn == 0 || N < 1 || sm_count < 1) return 1;
  const int64_t m_blocks = (int64_t(rows_total) / E + bm - 1) / bm;
  const int64_t tiles = std::max<int64_t>(1, int64_t(E) * m_blocks * n_blocks(N, bn));
  // Split only when the tiles leave at least half the SMs idle: with fewer
  // CTAs than that, neither the HBM nor the tensor cores are kept busy (the
  // sweep: Mixtral at P = 2, 64 rows, 64 tiles of 64 x 256: 2 splits 1.0-1.2x
  // faster; at 128 rows, 128 tiles: splitting into two waves is slower).
  if (2 * tiles > sm_count) return 1;
  const int64_t fill = sm_count / tiles;                      // splits that keep one wave
  const int64_t deep = (K + 63) / 64 / kMoeMinSplitKBlocks;  // each range long enough
  return int(std::max<int64_t>(1, std::min<int64_t>({fill, deep, kMoeMaxSplits})));
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
