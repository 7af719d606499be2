#pragma once
// The tiles of the attention forward: BLOCK_M query rows of one (batch,
// head), numbered m-block fastest, then head, then batch, so that CTAs
// running at the same time share one (batch, head)'s K and V in L2. The
// attention schedulers (linear.cuh, ordered.cuh) walk these numbers.
#include <cstdint>

#include "device/host_device.hpp"

namespace xstage::sched {

struct TileCoord {
  int b, h, m_block;
};

// The problem as the attention schedulers see it; the kernel fills it
// (attention::tile_shape).
struct AttentionShape {
  int B = 0, H = 0, S_q = 0;  // batch, heads, query rows
};

struct AttentionTiles {
  int m_blocks, H, B;

  XSTAGE_HD AttentionTiles(const AttentionShape& p, int block_m)
      : m_blocks((p.S_q + block_m - 1) / block_m), H(p.H), B(p.B) {}

  XSTAGE_HD int64_t num_tiles() const { return tile_count<int64_t>(); }
  // The count in Count's arithmetic (sched/persistent_walk.cuh says why a
  // walk may want it in 32 bits; the host checks that it fits).
  template <class Count>
  XSTAGE_HD Count tile_count() const {
    return Count(m_blocks) * Count(H) * Count(B);
  }

  // Tile t's (b, h, m-block position), in Index's arithmetic: 32 bits where
  // the host has checked the count fits and the divisions are on a critical
  // path (a 64-bit division is a long software routine; perf-log f7).
  template <class Index>
  XSTAGE_HD TileCoord split(Index t) const {
    TileCoord c;
    c.m_block = int(t % Index(m_blocks));
    t /= Index(m_blocks);
    c.h = int(t % Index(H));
    c.b = int(t / Index(H));
    return c;
  }
};

}  // namespace xstage::sched
