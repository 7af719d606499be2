#pragma once
// The receiver side of the fused Ulysses attention: rank d waits until every
// (source rank, b, head, m-block) that has rows in d's shard has set its flag
// to the run's epoch. One thread per flag, acquire loads, a timeout that
// names the rank, the flag and the values, then a trap (no silent hang).
#include <cstdint>

#include "device/attention/ulysses_params.hpp"
#include "device/ptx/flags.cuh"

namespace xstage::attention {

// Launched with gridDim.y = number of ranks waited for, from rank_first on.
__global__ void sm90_u64_ulysses_wait_flags(const UlyssesStoreParams p, int rank_first, int block_m,
                                            uint64_t timeout_ns) {
  const int d = rank_first + int(blockIdx.y);
  const RankRange mb = ulysses_receiver_m_blocks(d, block_m, p.S, p.chunk);
  if (mb.last < mb.first) return;  // an empty shard (S < P * chunk) receives nothing
  const int mb_lo = mb.first;
  const int64_t span = mb.last - mb.first + 1;
  const int64_t streams = int64_t(p.P) * p.batch * p.heads_per_rank;  // (src, b, h)
  const uint64_t* flags = p.flags[d];
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < streams * span;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t idx = (k / span) * p.m_blocks + mb_lo + k % span;
    ptx::wait_flag_geq(flags + idx, p.epoch, d, int(idx), timeout_ns);
  }
}

}  // namespace xstage::attention
