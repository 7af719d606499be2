#pragma once
// Tile order from a table, for the fused Ulysses attention. Within each
// (batch block, head) the i-th tile is m-block order[src * m_blocks + i]; i is
// the fastest index, so CTAs running at the same time share one (b, h)'s K and
// V in L2 exactly as in the linear order, but their output rows may go to
// different ranks. The host builds the table (linear: identity; rotated:
// round-robin over destinations starting at src + 1, so at any moment rank r's
// tiles and rank r + 1's tiles target different receivers).
#include <cstdint>

#include "device/sched/attention_tile.hpp"
#include "device/sched/ordered_params.hpp"
#include "device/sched/persistent_walk.cuh"

namespace xstage::sched {

struct OrderedTileScheduler : AttentionTiles, PersistentWalk<OrderedTileScheduler> {
  using Params = OrderedSchedulerParams;
  struct SharedStorage {};
  using Coord = TileCoord;
  Params sp;

  __host__ __device__ OrderedTileScheduler(const AttentionShape& p, const Params& sp_, int block_m)
      : AttentionTiles(p, block_m), sp(sp_) {}

  __device__ __forceinline__ TileCoord coord(Work<int64_t> w) const {
    TileCoord c = split(w.t);
    const int src = sp.rank_base + c.b / sp.batch;
    c.m_block = __ldg(sp.order + int64_t(src) * m_blocks + c.m_block);
    return c;
  }
  // The same in 32-bit arithmetic (the host checks the tile count fits).
  __device__ __forceinline__ TileCoord coord(Work<uint32_t> w) const {
    TileCoord c = split(w.t);
    const int src = sp.rank_base + int(uint32_t(c.b) / uint32_t(sp.batch));
    c.m_block = __ldg(sp.order + src * m_blocks + c.m_block);
    return c;
  }
};

}  // namespace xstage::sched
