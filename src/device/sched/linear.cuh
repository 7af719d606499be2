#pragma once
// The attention forward's linear tile order: m-block fastest, then head, then
// batch, so that CTAs running at the same time share one (batch, head)'s K and
// V, which then stay in L2. The contract: sched/persistent_walk.cuh.
#include <cstdint>

#include "device/attention/attention_params.hpp"
#include "device/sched/attention_tile.hpp"
#include "device/sched/persistent_walk.cuh"

namespace xstage::sched {

struct LinearTileScheduler : PersistentWalk<LinearTileScheduler> {
  struct Params {};
  struct SharedStorage {};
  using Coord = TileCoord;
  int m_blocks, H, B;

  __host__ __device__ LinearTileScheduler(const attention::MainloopParams& p, const Params&, int block_m)
      : m_blocks((p.S_q + block_m - 1) / block_m), H(p.H), B(p.B) {}
  __host__ __device__ int64_t num_tiles() const { return tile_count<int64_t>(); }
  template <class Count>
  __host__ __device__ Count tile_count() const {
    return Count(m_blocks) * Count(H) * Count(B);
  }

  __device__ __forceinline__ TileCoord coord(Work<int64_t> w) const {
    int64_t t = w.t;
    TileCoord c;
    c.m_block = int(t % m_blocks);
    t /= m_blocks;
    c.h = int(t % H);
    c.b = int(t / H);
    return c;
  }
  // The same in 32-bit arithmetic (the host checks the tile count fits).
  __device__ __forceinline__ TileCoord coord(Work<uint32_t> w) const {
    uint32_t t = w.t;
    TileCoord c;
    c.m_block = int(t % uint32_t(m_blocks));
    t /= uint32_t(m_blocks);
    c.h = int(t % uint32_t(H));
    c.b = int(t / uint32_t(H));
    return c;
  }
};

}  // namespace xstage::sched
