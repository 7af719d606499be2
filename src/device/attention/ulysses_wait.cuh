#pragma once
// The receiver side of the fused Ulysses attention: rank d waits until every
// (source rank, b, head, m-block) that has rows in d's shard has set its flag
// to the run's epoch, with a timeout that names the rank, the flag and the
// values (no silent hang: the host aborts with them).
//
// The fused kernels wait at their end, in the grid's last CTA, which has
// the fewest tiles (ulysses_receive_at_end): no second launch, and a rank's
// kernel ends only when its data has arrived. Measured on the H200
// (docs/perf-log.md, f8-f10) with device buffers at S = 4096: a separate
// wait kernel cost ~1% (~3 us and a launch gap); the earlier in-kernel wait,
// in the CTA that counted itself last, ~2% (~11k SM cycles after the last
// tile); this one ~1% (~3-5k).
#include <cstdint>

#include "device/attention/ulysses_params.hpp"
#include "device/attention/ulysses_wait_trace.cuh"
#include "device/ptx/fence.cuh"
#include "device/ptx/flags.cuh"
#include "device/ptx/timer.cuh"

namespace xstage::attention {

// The flags of the receivers [p.recv_rank_first, + p.recv_ranks): their
// slots (ulysses_flag_index) laid rank after rank, slot g to thread g %
// threads, polled with relaxed loads and ended by one acquire fence. A thread
// polls kBatch slots at a time, all loads in flight before it looks at any,
// and reloads the whole batch until every flag in it is set: at the kernel's
// end a system-scope load takes microseconds to come back, so a batch polled
// flag by flag would pay one of those per flag after the last one lands
// (measured: loop done ~11 us after the last flag was published, perf-log
// f10). Index arithmetic in 32 bits, no 64-bit division (the first version
// took ~2k cycles a flag, f9). On a timeout the first thread to time out
// fills p.timeout_record (rank, flag, values) and every thread that times out
// stops waiting: the kernel ends and the host aborts with the record
// (UlyssesAttention::check_receivers). No printf here: a call in the fused
// kernel made ptxas spill ~300 bytes a thread in its mainloop (perf-log f8).
__device__ __forceinline__ void wait_for_receiver_flags(const UlyssesStoreParams& p, int tid, int threads) {
  constexpr int kBatch = 4;
  // 32 bits: the host checks that S and every rank's slot count fit.
  const int stride = p.flag_stride, per_rank = p.P * p.batch * p.heads_per_rank * stride;
  const int total = p.recv_ranks * per_rank, chunk = int(p.chunk), S = int(p.S);
  // Slot g: rank recv_rank_first + g / per_rank, slot k = g % per_rank of its
  // array; a flag to wait for while k % stride < the rank's m-block span.
  auto locate = [&](int g, int& d, int& k) -> bool {
    const int r = g / per_rank;
    d = p.recv_rank_first + r, k = g - r * per_rank;
    const int begin = d * chunk, end = min(begin + chunk, S);
    const int span = end > begin ? (end - 1) / p.block_m - begin / p.block_m + 1 : 0;
    return k % stride < span;
  };
  const uint64_t start = ptx::globaltimer_ns();
  WaitTrace trace(p);
  for (int g0 = tid; g0 < total; g0 += kBatch * threads) {
    const uint64_t* flag[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int g = g0 + u * threads;
      int d, k;
      flag[u] = g < total && locate(g, d, k) ? p.flags[d] + k : nullptr;
    }
    for (;;) {
      uint64_t least = ~uint64_t(0);
      int least_g = g0;  // the slot that holds it (unrolled selects: no array indexed at run time)
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (flag[u] == nullptr) continue;
        const uint64_t seen = ptx::ld_relaxed_sys_u64(flag[u]);
        trace.load();
        least_g = seen < least ? g0 + u * threads : least_g;
        least = seen < least ? seen : least;
      }
      trace.batch_back(least);
      if (least >= p.recv_epoch) break;
      const uint64_t waited = ptx::globaltimer_ns() - start;
      if (waited > p.timeout_ns) {
        FlagTimeoutRecord* r = p.timeout_record;
        int d, k;
        locate(least_g, d, k);
        if (r != nullptr && atomicCAS(&r->set, 0u, 1u) == 0u) {
          r->rank = d, r->flag = k, r->block = int(blockIdx.x), r->thread = int(threadIdx.x);
          r->waited_ns = waited, r->expected = p.recv_epoch, r->seen = least;
        }
        return;
      }
      __nanosleep(p.experiment & kExperimentSlowPoll ? 2000 : 64);
      trace.sleep();
    }
  }
  trace.loop_done();
  // Acquire: what the flags published is visible from here on.
  if (!(p.experiment & kExperimentNoAcquireFence)) ptx::fence_acq_rel_sys();
  trace.fence_done();
}

// At the end of a fused kernel, by its epilogue threads (`bar` synchronises
// them): the grid's last CTA waits for the flags of the launch's receivers.
// Tile t runs on CTA t % gridDim.x, so the last CTA has the fewest tiles of
// a persistent grid: when the tiles do not divide evenly it finishes a tile
// earlier than the first CTAs, else with them, and polls while the rest
// compute their last tiles. Its cold code (the first pass over the
// flags) runs off the kernel's critical path, and the last flag published is
// seen one poll later. (The first version let the CTA that counted itself
// last wait: an atomic count, a barrier and the wait's first pass, all after
// the last tile, cost ~11k SM cycles at S = 4096: docs/perf-log.md, f9, f10.)
// It holds one CTA slot: every other CTA keeps its own, and one not yet
// resident runs when another finishes, so the wait cannot deadlock as long
// as the GPU offers the launch at least two slots (a partition of one SM
// with room for one CTA would need the wait kernel back). The timeout counts
// from the start of the wait, which includes the other CTAs' last tiles.
template <int THREADS, class Bar>
__device__ __forceinline__ void ulysses_receive_at_end(const UlyssesStoreParams& p, int tid, Bar&& bar) {
  if (!p.receive || p.recv_ranks < 1 || (p.experiment & kExperimentNoWait)) return;
  if (tracing(p)) {  // when this CTA's flags are all published
    bar();
    if (tid == 0) trace_published(p);
  }
  if (blockIdx.x != gridDim.x - 1) return;
  if (tid == 0) trace_wait_start(p);
  wait_for_receiver_flags(p, tid, THREADS);
}

}  // namespace xstage::attention
