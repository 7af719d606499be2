#pragma once
// The attention forward's linear tile order (sched/attention_tile.hpp): tile
// t is the t-th (b, h, m-block). The contract: sched/persistent_walk.cuh.
#include <cstdint>

#include "device/sched/attention_tile.hpp"
#include "device/sched/persistent_walk.cuh"

namespace xstage::sched {

struct LinearTileScheduler : AttentionTiles, PersistentWalk<LinearTileScheduler> {
  struct Params {};
  struct SharedStorage {};
  using Coord = TileCoord;

  __host__ __device__ LinearTileScheduler(const AttentionShape& p, const Params&, int block_m)
      : AttentionTiles(p, block_m) {}

  template <class Index>
  __device__ __forceinline__ TileCoord coord(Work<Index> w) const {
    return split(w.t);
  }
};

}  // namespace xstage::sched
