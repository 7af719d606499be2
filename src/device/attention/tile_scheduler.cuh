#pragma once
// Tile order of the attention forward kernel, a policy the kernel is
// instantiated with. A tile is BLOCK_M query rows of one (batch, head). The
// kernel walks tiles t = blockIdx.x, blockIdx.x + gridDim.x, ...; the policy
// maps t to coordinates and says how many CTAs to launch. A persistent or
// communication-aware order (longest-first, interleaving tiles whose outputs
// go to different ranks) is another policy with the same three members.
#include <cstdint>

namespace xstage::attention {

struct TileCoord {
  int b, h, m_block;
};

// m-block fastest, then head, then batch: CTAs running at the same time share
// one (batch, head)'s K and V, which then stay in L2. One CTA per tile.
struct LinearTileScheduler {
  int m_blocks, H, B;

  __host__ __device__ LinearTileScheduler(int S_q, int H_, int B_, int block_m)
      : m_blocks((S_q + block_m - 1) / block_m), H(H_), B(B_) {}

  __host__ __device__ int64_t num_tiles() const { return int64_t(m_blocks) * H * B; }

  __device__ TileCoord tile(int64_t t) const {
    TileCoord c;
    c.m_block = int(t % m_blocks);
    t /= m_blocks;
    c.h = int(t % H);
    c.b = int(t / H);
    return c;
  }

  // CTAs to launch; the kernel loops when this is smaller than num_tiles().
  __host__ static int64_t grid_size(int64_t num_tiles, int /*sm_count*/, int /*ctas_per_sm*/) { return num_tiles; }
};

}  // namespace xstage::attention
