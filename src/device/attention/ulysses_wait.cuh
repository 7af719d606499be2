#pragma once
// The receiver side of the fused Ulysses attention: rank d waits until every
// (source rank, b, head, m-block) that has rows in d's shard has set its flag
// to the run's epoch. Acquire loads, a timeout that names the rank, the flag
// and the values, then a trap (no silent hang).
//
// The fused kernels wait at their end, in the CTA that finishes last
// (ulysses_receive_at_end): no second launch (a kernel of its own after the
// fused one cost ~3 us plus the launch gap, ~1% at S = 4096; docs/perf-log.md,
// f8), and nothing polls while tiles are still computed.
#include <cstdint>

#include "device/attention/ulysses_params.hpp"
#include "device/ptx/flags.cuh"

namespace xstage::attention {

// Every flag rank d waits for, thread `thread` of `threads` taking every
// threads-th one.
__device__ __forceinline__ void wait_for_rank_flags(const UlyssesStoreParams& p, int d, int block_m,
                                                    uint64_t timeout_ns, int64_t thread, int64_t threads) {
  const RankRange mb = ulysses_receiver_m_blocks(d, block_m, p.S, p.chunk);
  if (mb.last < mb.first) return;  // an empty shard (S < P * chunk) receives nothing
  const int mb_lo = mb.first;
  const int64_t span = mb.last - mb.first + 1;
  const int64_t streams = int64_t(p.P) * p.batch * p.heads_per_rank;  // (src, b, h)
  const uint64_t* flags = p.flags[d];
  for (int64_t k = thread; k < streams * span; k += threads) {
    const int64_t idx = (k / span) * p.m_blocks + mb_lo + k % span;
    ptx::wait_flag_geq(flags + idx, p.epoch, d, int(idx), timeout_ns);
  }
}

// At the end of a fused kernel, by its epilogue threads (`bar` synchronises
// them): the CTA that counts itself last (p.ctas_done, reset by it for the
// next launch, which stream order puts after this one) waits for the flags of
// the launch's receivers. Every other CTA's flags are published before it
// counts itself, so on one GPU the wait finds them set; across GPUs it waits
// for the other ranks' kernels. No CTA waits while another still has tiles,
// so a grid larger than what fits at once cannot deadlock on it.
template <int THREADS, class Bar>
__device__ __forceinline__ void ulysses_receive_at_end(const UlyssesStoreParams& p, int tid, Bar&& bar) {
  if (p.ctas_done == nullptr || p.recv_ranks < 1) return;
  __shared__ int last;
  if (tid == 0) {
    last = atomicAdd(p.ctas_done, 1u) == gridDim.x - 1;
    if (last) *p.ctas_done = 0u;
  }
  bar();
  if (!last) return;
  for (int r = 0; r < p.recv_ranks; ++r)
    wait_for_rank_flags(p, p.recv_rank_first + r, p.block_m, p.timeout_ns, tid, THREADS);
}

}  // namespace xstage::attention
