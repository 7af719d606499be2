#pragma once
// Tile order from a table, for the fused Ulysses attention. Within each
// (batch block, head) the i-th tile is m-block order[src * m_blocks + i]; i is
// the fastest index, so CTAs running at the same time share one (b, h)'s K and
// V in L2 exactly as in the linear order, but their output rows may go to
// different ranks. The host builds the table (linear: identity; rotated:
// round-robin over destinations starting at src + 1, so at any moment rank r's
// tiles and rank r + 1's tiles target different receivers).
#include <cstdint>

#include "device/attention/attention_params.hpp"
#include "device/sched/attention_tile.hpp"
#include "device/sched/ordered_params.hpp"
#include "device/sched/persistent_walk.cuh"

namespace xstage::sched {

struct OrderedTileScheduler : PersistentWalk<OrderedTileScheduler> {
  using Params = OrderedSchedulerParams;
  struct SharedStorage {};
  using Coord = TileCoord;
  int m_blocks, H, B;
  Params sp;

  __host__ __device__ OrderedTileScheduler(const attention::MainloopParams& p, const Params& sp_, int block_m)
      : m_blocks((p.S_q + block_m - 1) / block_m), H(p.H), B(p.B), sp(sp_) {}
  __host__ __device__ int64_t num_tiles() const { return tile_count<int64_t>(); }
  template <class Count>
  __host__ __device__ Count tile_count() const {
    return Count(m_blocks) * Count(H) * Count(B);
  }

  __device__ __forceinline__ TileCoord coord(Work<int64_t> w) const {
    int64_t t = w.t;
    TileCoord c;
    const int i = int(t % m_blocks);
    t /= m_blocks;
    c.h = int(t % H);
    c.b = int(t / H);
    const int src = sp.rank_base + c.b / sp.batch;
    c.m_block = __ldg(sp.order + int64_t(src) * m_blocks + i);
    return c;
  }
  // The same in 32-bit arithmetic (the host checks the tile count fits).
  __device__ __forceinline__ TileCoord coord(Work<uint32_t> w) const {
    uint32_t t = w.t;
    TileCoord c;
    const int i = int(t % uint32_t(m_blocks));
    t /= uint32_t(m_blocks);
    c.h = int(t % uint32_t(H));
    c.b = int(t / uint32_t(H));
    const int src = sp.rank_base + int(uint32_t(c.b) / uint32_t(sp.batch));
    c.m_block = __ldg(sp.order + src * m_blocks + i);
    return c;
  }
};

}  // namespace xstage::sched
