#pragma once
// The receivers' timed wait: a rank waits until every flag its destination
// map names (Dest::ReceiverFlags) holds the run's epoch, with a timeout
// that names the rank, the flag and the values (no silent hang: the host
// aborts with them).
//
// Fused kernels wait at their end, in the grid's last CTA (receive_at_end):
// no second launch, and a rank's kernel ends only when its data has arrived.
// Measured on the H200 (perf-log f8-f10) with device buffers at S = 4096: a
// separate wait kernel cost ~1% (~3 us and a launch gap); a wait in the CTA
// that counted itself last ~2% (~11k SM cycles after the last tile); this
// one ~1% (~3-5k).
#include <cstdint>

#include "device/ptx/fence.cuh"
#include "device/ptx/flags.cuh"
#include "device/remote/diagnostics.hpp"
#include "device/remote/timed_wait.cuh"
#include "device/remote/wait_trace.cuh"

namespace xstage::remote {

// The receiver flags, slot g to thread g % threads, polled with relaxed
// loads and ended by one acquire fence. A thread polls kBatch slots at a
// time, all loads in flight before it looks at any, and reloads the whole
// batch until every flag in it is set: at the kernel's end a system-scope
// load takes microseconds to come back, so a batch polled flag by flag would
// pay one of those per flag after the last one lands (perf-log f10). A
// timeout is the library's one (timed_wait.cuh): the record names the rank
// and flag, the thread stops waiting, the kernel ends and the host aborts
// with the record.
template <class Dest>
__device__ __forceinline__ void wait_for_flags(const typename Dest::Params& p, int tid, int threads) {
  constexpr int kBatch = 4;
  const typename Dest::ReceiverFlags rf(p);
  const int total = rf.total();
  const WaitBudget budget = start_wait(p.timeout_ns, p.timeout_record);
  WaitTrace trace(p);
  for (int g0 = tid; g0 < total; g0 += kBatch * threads) {
    const uint64_t* flag[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int g = g0 + u * threads;
      int d, k;
      flag[u] = g < total && rf.locate(g, d, k) ? p.flags[d] + k : nullptr;
    }
    int least_g = g0;  // the slot that holds the least value polled last
    bool first = true;
    auto poll = [&] {
      if (!first) trace.sleep();
      first = false;
      uint64_t least = ~uint64_t(0);
      least_g = g0;  // (unrolled selects: no array indexed at run time)
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (flag[u] == nullptr) continue;
        const uint64_t seen = ptx::ld_relaxed_sys_u64(flag[u]);
        trace.load();
        least_g = seen < least ? g0 + u * threads : least_g;
        least = seen < least ? seen : least;
      }
      trace.batch_back(least);
      return least;
    };
    const bool ok = wait_geq(poll, poll(), p.recv_epoch, budget, [&](int& d, int& k) { rf.locate(least_g, d, k); },
                             diag(p, kDiagSlowPoll) ? 2000 : 64);
    if (!ok) return;
  }
  trace.loop_done();
  // Acquire: what the flags published is visible from here on.
  if (!diag(p, kDiagNoAcquireFence)) ptx::fence_acq_rel_sys();
  trace.fence_done();
}

// At the end of a fused kernel, by its epilogue threads (`bar` synchronises
// them): the grid's last CTA waits for the flags of the launch's receivers.
// Tile t runs on CTA t % gridDim.x (sched/persistent_walk.cuh), so the last
// CTA has the fewest tiles of a persistent grid: when the tiles do not
// divide evenly it finishes a tile earlier than the first CTAs, else with
// them, and polls while the rest compute their last tiles. Its cold code
// (the first pass over the flags) runs off the kernel's critical path, and
// the last flag published is seen one poll later (an atomic count of
// finished CTAs, a barrier and the first pass after the last tile cost ~11k
// SM cycles at S = 4096: perf-log f9, f10). It holds one CTA slot: every
// other CTA keeps its own, and one not yet resident runs when another
// finishes, so the wait cannot deadlock as long as the GPU offers the launch
// at least two slots. The timeout counts from the start of the wait, which
// includes the other CTAs' last tiles.
template <class Dest, int THREADS, class Bar>
__device__ __forceinline__ void receive_at_end(const typename Dest::Params& p, int tid, Bar&& bar) {
  if (!p.receive || p.recv_ranks < 1 || diag(p, kDiagNoWait)) return;
  if (tracing(p)) {  // when this CTA's flags are all published
    bar();
    if (tid == 0) trace_published(p);
  }
  if (blockIdx.x != gridDim.x - 1) return;
  if (tid == 0) trace_wait_start(p);
  wait_for_flags<Dest>(p, tid, THREADS);
}

}  // namespace xstage::remote
