#pragma once
// Tail split: the grouped GEMM's answer to wave quantisation. A persistent
// launch of G CTAs over T equal tiles (every tile of a grouped GEMM has the
// same K) takes ceil(T / G) waves; when the last wave holds r <= G / 2 tiles,
// G - r SMs idle through a whole tile. Splitting each of those r tiles' k-blocks
// s <= G / r ways over the idle CTAs (their fp32 partials summed by the
// tile's last CTA, grouped_gemm_sm90.cuh's split_reduce) shortens the last
// wave to about a tile's 1 / s plus the reduction. Tiles before the tail
// run whole, so their k loop stays the plain kernel's.
//
// The tile count lives on the device (the experts' offsets), so the CTAs
// work the layout out there (grouped.cuh); these are its pure parts, shared
// with the host's tests. Items are numbered as the strided walk numbers them
// (item t on CTA t mod G).
#include "device/host_device.hpp"

namespace xstage::sched {

struct TailSplitLayout {
  int whole;   // tiles [0, whole) run whole; the rest split
  int splits;  // ways each tile from `whole` on is split (1: none is)
};

// max_splits: the host's cap (from K: enough k-blocks a split to pay for its
// partial's round trip), at most the k-blocks. No split unless at least one
// full wave precedes the tail: then items t < G are whole tiles whatever T
// is, so a CTA starts its first tile before the count is known.
XSTAGE_HD inline TailSplitLayout tail_split_layout(int tiles, int grid, int max_splits) {
  if (grid < 1 || tiles < grid) return {tiles, 1};
  const int waves = tiles / grid, r = tiles % grid;
  int s = r > 0 ? grid / r : 1;
  if (s > max_splits) s = max_splits;
  if (s < 2) return {tiles, 1};
  return {waves * grid, s};
}

struct TailSplitItem {
  int tile;    // the tile of the launch's order (>= tiles: past the end)
  int split;   // its k range, 0 .. splits - 1
  int splits;  // 1: a whole tile
  int slot;    // split tiles: the tile's place in the tail (partials and count)
};

XSTAGE_HD inline TailSplitItem tail_split_item(int t, TailSplitLayout l) {
  if (t < l.whole) return {t, 0, 1, 0};
  const int q = t - l.whole;
  return {l.whole + q / l.splits, q % l.splits, l.splits, q / l.splits};
}

}  // namespace xstage::sched
