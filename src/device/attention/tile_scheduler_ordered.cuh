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
#include "device/attention/tile_scheduler.cuh"
#include "device/attention/ulysses_params.hpp"

namespace xstage::attention {

struct OrderedTileScheduler {
  using Params = OrderedSchedulerParams;
  int m_blocks, H, B;
  Params sp;

  __host__ __device__ OrderedTileScheduler(const MainloopParams& p, const Params& sp_, int block_m)
      : m_blocks((p.S_q + block_m - 1) / block_m), H(p.H), B(p.B), sp(sp_) {}

  __host__ __device__ int64_t num_tiles() const { return int64_t(m_blocks) * H * B; }

  __device__ TileCoord tile(int64_t t) const {
    TileCoord c;
    const int i = int(t % m_blocks);
    t /= m_blocks;
    c.h = int(t % H);
    c.b = int(t / H);
    const int src = sp.rank_base + c.b / sp.batch;
    c.m_block = __ldg(sp.order + int64_t(src) * m_blocks + i);
    return c;
  }
  // tile(t) in 32-bit arithmetic, for t < 2^31 (LinearTileScheduler::tile32).
  __device__ TileCoord tile32(uint32_t t) const {
    TileCoord c;
    const int i = int(t % uint32_t(m_blocks));
    t /= uint32_t(m_blocks);
    c.h = int(t % uint32_t(H));
    c.b = int(t / uint32_t(H));
    const int src = sp.rank_base + int(uint32_t(c.b) / uint32_t(sp.batch));
    c.m_block = __ldg(sp.order + src * m_blocks + i);
    return c;
  }

  // Persistent: as many CTAs as fit at once, each walking every gridDim-th
  // tile (the same order one CTA per tile would run in).
  __host__ static int64_t grid_size(int64_t num_tiles, int sm_count, int ctas_per_sm) {
    const int64_t resident = int64_t(sm_count) * ctas_per_sm;
    return num_tiles < resident ? num_tiles : resident;
  }
};

}  // namespace xstage::attention
