#pragma once
// Tile order of the attention forward kernel, a policy the kernel is
// instantiated with. A tile is BLOCK_M query rows of one (batch, head). The
// kernel walks tiles t = blockIdx.x, blockIdx.x + gridDim.x, ...; the policy
// maps t to coordinates and says how many CTAs to launch. Members of a policy:
//   Params                      plain struct passed to the kernel by value
//   Scheduler(mainloop, params, block_m)   constructed by every CTA
//   num_tiles(), tile(t), static grid_size(num_tiles, sms, ctas_per_sm)
// The fused Ulysses attention adds a rank-rotated order
// (device/attention/tile_scheduler_ordered.cuh).
#include <cstdint>

#include "device/attention/attention_params.hpp"

namespace xstage::attention {

struct TileCoord {
  int b, h, m_block;
};

// m-block fastest, then head, then batch: CTAs running at the same time share
// one (batch, head)'s K and V, which then stay in L2.
struct LinearTileScheduler {
  struct Params {};
  int m_blocks, H, B;

  __host__ __device__ LinearTileScheduler(const MainloopParams& p, const Params&, int block_m)
      : m_blocks((p.S_q + block_m - 1) / block_m), H(p.H), B(p.B) {}

  __host__ __device__ int64_t num_tiles() const { return int64_t(m_blocks) * H * B; }

  __device__ TileCoord tile(int64_t t) const {
    TileCoord c;
    c.m_block = int(t % m_blocks);
    t /= m_blocks;
    c.h = int(t % H);
    c.b = int(t / H);
    return c;
  }
  // tile(t) in 32-bit arithmetic, for t < 2^31 (the fused kernels: the host
  // checks their tile count). Not used by the producer: 32-bit schedulers
  // there made the kernels' code slower (docs/perf-log.md, f8).
  __device__ TileCoord tile32(uint32_t t) const {
    TileCoord c;
    c.m_block = int(t % uint32_t(m_blocks));
    t /= uint32_t(m_blocks);
    c.h = int(t % uint32_t(H));
    c.b = int(t / uint32_t(H));
    return c;
  }

  // CTAs to launch; the kernel loops when this is smaller than num_tiles().
  // Persistent: as many CTAs as fit at once, each walking every gridDim-th
  // tile (the same order one CTA per tile would run in).
  __host__ static int64_t grid_size(int64_t num_tiles, int sm_count, int ctas_per_sm) {
    const int64_t resident = int64_t(sm_count) * ctas_per_sm;
    return num_tiles < resident ? num_tiles : resident;
  }
};

}  // namespace xstage::attention
