#pragma once
// Completion flags of the remote-store layer: a flag per (tile, destination)
// set to the run's epoch with st.release.sys, cumulative over the CTA
// barrier that follows the tile's stores, so a receiver that sees the flag
// (acquire) sees the rows. When (Completion, xstage/remote_store.hpp):
//   lagged   just before the CTA's next tile's stores, the last tile's at CTA
//            exit. A release is a system-scope fence, and on a posted-write
//            path a fence returns only when the writes queued before it have
//            drained: published right after the stores it would make every
//            tile wait for its own drain (eager, measured in perf-log f1).
//   eager    right after the tile's stores.
//   at_exit  all of a CTA's flags when it has no tiles left, by all its
//            epilogue threads at once (no fence on any tile's path;
//            receivers learn of every tile at the end).
//   coupled  after fence.sc.sys and a system-scope load of a stored word in
//            every destination (the read cannot return before the writes
//            queued ahead of it on the same path): the tile's stores are
//            remotely visible before its SM moves on, the
//            completion-coupled counterfactual made real.
#include <cstdint>

#include "device/ptx/fence.cuh"
#include "device/ptx/flags.cuh"
#include "device/remote/rank_range.hpp"
#include "xstage/comm/remote_store.hpp"

namespace xstage::remote {

// Flags that cover a launch rather than a tile (release, system scope:
// whatever the calling thread's fence and barrier ordered before it is
// visible to a rank that acquires the flag): flags[rank][index] = epoch, and
// flags[d][index0 + s] = epoch for every rank d < ranks and s < count.
__device__ __forceinline__ void publish_flag(uint64_t* const* flags, int rank, int index, uint64_t epoch) {
  ptx::st_release_sys_u64(flags[rank] + index, epoch);
}
__device__ __forceinline__ void publish_flags(uint64_t* const* flags, int ranks, int index0, int count,
                                              uint64_t epoch) {
  for (int d = 0; d < ranks; ++d)
    for (int s = 0; s < count; ++s) publish_flag(flags, d, index0 + s, epoch);
}

// Sets a tile's flags (key: Dest::flag_key) in destinations dst.first..dst.last.
template <class Dest>
__device__ __forceinline__ void publish_tile(const typename Dest::Params& p, const typename Dest::FlagKey& key,
                                             RankRange dst) {
  for (int d = dst.first; d <= dst.last; ++d) ptx::st_release_sys_u64(Dest::flag(p, d, key), p.epoch);
}

// Completion::coupled: returns once the tile's stores to every destination
// are visible there.
template <class Dest>
__device__ __forceinline__ void wait_tile_visible(const typename Dest::Params& p, const typename Dest::Tile& c,
                                                  int m0, RankRange dst) {
  ptx::fence_sc_sys();
  uint32_t sink = 0;
  for (int d = dst.first; d <= dst.last; ++d)
    sink ^= ptx::ld_relaxed_sys_u32(Dest::rows(p, c).row(Dest::first_row_in(p, d, m0)));
  ptx::keep(sink);
}

// Completion::at_exit: every tile of the CTA (the scheduler's walk
// replayed), the k-th by epilogue thread k % THREADS, all at once: a release
// store is a fence of its own thread, cumulative over the barrier every
// thread passed after its stores. (One thread walking them all cost a
// dependent table load and flag store per tile at the kernel's very end:
// ~1.2% of the kernel at S = 4096; perf-log f8.) 32-bit tile indices (the
// host checks the count fits): the divisions are on the kernel's critical path.
template <class Dest, int THREADS, class Scheduler>
__device__ __forceinline__ void publish_every_tile(const typename Dest::Params& p, const Scheduler& sched,
                                                   int block_m, int tid) {
  const auto walk = sched.template walk<uint32_t>();
  for (auto w = walk.template nth<uint32_t>(uint32_t(tid)); walk.valid(w); w = walk.next(w, uint32_t(THREADS))) {
    const auto c = sched.coord(w);
    const RankRange dst = Dest::destinations(p, Dest::first_row(c, block_m), block_m);
    publish_tile<Dest>(p, Dest::flag_key(p, c), dst);
  }
}

// At CTA exit: every tile at once (at_exit), else thread 0 publishes what
// the last tile left pending (`publish_last`).
template <class Dest, Completion kCompletion, int THREADS, class Scheduler, class PublishLast>
__device__ __forceinline__ void finish_flags(const typename Dest::Params& p, const Scheduler& sched, int block_m,
                                             int tid, PublishLast&& publish_last) {
  if constexpr (kCompletion == Completion::at_exit)
    publish_every_tile<Dest, THREADS>(p, sched, block_m, tid);
  else if (tid == 0)
    publish_last();
}

}  // namespace xstage::remote
