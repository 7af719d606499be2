#pragma once
// The receiver side of the fused Ulysses attention: rank d waits until every
// (source rank, b, head, m-block) that has rows in d's shard has set its flag
// to the run's epoch. Acquire loads, a timeout that names the rank, the flag
// and the values (no silent hang: the host aborts with them).
//
// The fused kernels wait at their end, in the CTA that finishes last
// (ulysses_receive_at_end): no second launch (a kernel of its own after the
// fused one cost ~3 us plus the launch gap, ~1% at S = 4096; docs/perf-log.md,
// f8), and nothing polls while tiles are still computed.
#include <cstdint>

#include "device/attention/ulysses_params.hpp"
#include "device/ptx/fence.cuh"
#include "device/ptx/flags.cuh"
#include "device/ptx/timer.cuh"

namespace xstage::attention {

// The flags of the receivers [p.recv_rank_first, + p.recv_ranks), each
// rank's spread over `threads` threads, polled with relaxed loads (an acquire
// load per flag costs more) and ended by one acquire fence. On a timeout the first thread to time
// out fills p.timeout_record (rank, flag, values) and every thread that times
// out stops waiting: the kernel ends and the host aborts with the record
// (UlyssesAttention::check_receivers). No printf here: a call in the fused
// kernel made ptxas spill ~300 bytes a thread in its mainloop (perf-log f8).
__device__ __forceinline__ void wait_for_receiver_flags(const UlyssesStoreParams& p, int tid, int threads) {
  // 32-bit index arithmetic: S, the chunk and the flag counts fit in 31 bits.
  const uint32_t streams = uint32_t(p.P) * uint32_t(p.batch) * uint32_t(p.heads_per_rank);  // (src, b, h)
  const uint32_t S = uint32_t(p.S), chunk = uint32_t(p.chunk), bm = uint32_t(p.block_m);
  const uint64_t start = ptx::globaltimer_ns();
  for (int r = 0; r < p.recv_ranks; ++r) {
    const int d = p.recv_rank_first + r;
    const uint32_t begin = uint32_t(d) * chunk;
    if (begin >= S) continue;  // an empty shard (S < P * chunk) receives nothing
    const uint32_t end = begin + chunk < S ? begin + chunk : S;
    const uint32_t mb_first = begin / bm, span = (end - 1) / bm - mb_first + 1;
    const uint64_t* flags = p.flags[d];
    for (uint32_t k = uint32_t(tid); k < streams * span; k += uint32_t(threads)) {
      const uint32_t idx = (k / span) * uint32_t(p.m_blocks) + mb_first + k % span;
      uint64_t seen = ptx::ld_relaxed_sys_u64(flags + idx);
      while (seen < p.recv_epoch) {
        const uint64_t waited = ptx::globaltimer_ns() - start;
        if (waited > p.timeout_ns) {
          FlagTimeoutRecord* rec = p.timeout_record;
          if (rec != nullptr && atomicCAS(&rec->set, 0u, 1u) == 0u) {
            rec->rank = d, rec->flag = int(idx), rec->block = int(blockIdx.x), rec->thread = int(threadIdx.x);
            rec->waited_ns = waited, rec->expected = p.recv_epoch, rec->seen = seen;
          }
          return;
        }
        __nanosleep(64);
        seen = ptx::ld_relaxed_sys_u64(flags + idx);
      }
    }
  }
  ptx::fence_acq_rel_sys();  // acquire: what the flags published is visible from here on
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
  wait_for_receiver_flags(p, tid, THREADS);
}

}  // namespace xstage::attention
