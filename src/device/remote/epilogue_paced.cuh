#pragma once
// Remote-store epilogue with paced sends: a tile's rows are staged in shared
// memory of their own and sent in slices during the CTA's *next* tile's
// mainloop, at most one slice per step, so that each SM adds its bytes to the
// X-Stage at a steady rate instead of a whole tile at once.
//
// Why (perf-log f3): on the H200's host path a tile's stores issued at once
// did not overlap the next tile's mainloop, whatever the flag timing (eager,
// lagged, at exit): the fused kernel ran as slow as attention followed by
// the all-to-all. Slices of at least paced_min_rows rows (16 by default: 4
// KiB an SM at D = 128), evenly spaced over the steps, keep what each SM has
// queued small.
//
// Completion lagged: once all slices of a tile are sent and the CTA has
// passed a barrier (after the next tile's mainloop), thread 0 sets its flags;
// the CTA's last tile is sent and flagged at exit. At exit: every tile's
// flags when the CTA has no tiles left (no fence per tile).
#include <cstdint>

#include "device/remote/publish.cuh"
#include "device/remote/receive.cuh"
#include "device/remote/send.cuh"
#include "xstage/comm/remote_store.hpp"

namespace xstage::remote {

template <class Dest, Completion kCompletion>
struct RemotePacedEpilogue {
  static_assert(kCompletion == Completion::lagged || kCompletion == Completion::at_exit,
                "the paced path publishes its flags lagged or at exit");
  using Params = typename Dest::Params;
  using Tile = typename Dest::Tile;

  // Every thread holds the same copy: the tile whose rows wait in the staging buffer.
  struct Pending {
    Tile c{};
    int m0 = 0;
    int rows = 0;  // rows of the tile (BLOCK_M, fewer at the end)
    int sent = 0;  // rows sent so far
    bool valid = false;
    // Where the rows go, worked out once a tile (a 64-bit division per 16-byte
    // chunk, or per step, costs the wgmma kernel's consumers more than the
    // stores themselves; perf-log f6).
    RowRun dst{nullptr, 0, 0};
    // The plan, made at the next tile's step 0: `slice` rows every `interval`
    // steps, the next send at step `next_step` (-1: none due). A step that
    // sends nothing costs one comparison.
    int next_step = -1, interval = 1, slice = 0;
    bool planned = false;
  };
  static constexpr bool kBeforeStore = kCompletion == Completion::lagged;
  static constexpr bool kOwnStaging = true;

  // The kernel staged the rows in the epilogue's own buffer; they are sent later.
  template <int D, int SMEM_STRIDE>
  __device__ __forceinline__ static void store_rows(const Params&, const Tile&, int, int, const uint16_t*, int) {}
  __device__ __forceinline__ static void store_lse(const Params&, const Tile&, int, int, int, float) {}

  // Step j of n of the next tile; at step 0 the plan (paced_plan).
  template <int D, int SMEM_STRIDE, int THREADS>
  __device__ __forceinline__ static void mainloop_step(const Params& p, Pending& pend, const uint16_t* so, int j,
                                                       int n, int tid) {
    if (j != pend.next_step) return;
    if (!pend.planned) {  // j == 0: tile_done set next_step to 0
      const PacedPlan plan = paced_plan(pend.rows, p.paced_min_rows, n);
      pend.interval = plan.interval;
      pend.slice = plan.slice;
      pend.planned = true;
      pend.next_step = pend.interval - 1;
      if (pend.next_step != 0) return;
    }
    const int hi = pend.rows - pend.sent > pend.slice ? pend.sent + pend.slice : pend.rows;
    send<D, SMEM_STRIDE, THREADS>(p, pend, so, hi, tid);
    pend.next_step = hi < pend.rows ? pend.next_step + pend.interval : -1;
  }

  // Whatever is left of the pending tile. The kernel then synchronises its
  // epilogue threads: every thread is done reading the staging buffer and
  // every row is stored before the flags.
  template <int D, int SMEM_STRIDE, int THREADS>
  __device__ __forceinline__ static void flush(const Params& p, Pending& pend, const uint16_t* so, int tid) {
    if (pend.valid) send<D, SMEM_STRIDE, THREADS>(p, pend, so, pend.rows, tid);
    pend.next_step = -1;
  }

  // After flush: the pending tile's flags (lagged).
  __device__ __forceinline__ static void before_store(const Params& p, Pending& pend, int tid) {
    if (tid == 0) publish(p, pend);
  }

  __device__ __forceinline__ static void tile_done(const Params& p, const Tile& c, int m0, int block_m, int, int,
                                                   Pending& pend) {
    pend.c = c;
    pend.m0 = m0;
    pend.rows = Dest::tile_rows(p, m0, block_m);
    pend.sent = 0;
    pend.valid = true;
    pend.planned = false;
    pend.next_step = 0;  // planned at the next tile's first step
    pend.dst = Dest::rows(p, c).run(m0, pend.rows);
  }

  // After the last flush: the CTA's last tile.
  template <int THREADS, class Scheduler, class Bar>
  __device__ __forceinline__ static void finish(const Params& p, Pending& pend, const Scheduler& sched, int block_m,
                                                int, int tid, Bar&&) {
    finish_flags<Dest, kCompletion, THREADS>(p, sched, block_m, tid, [&] { publish(p, pend); });
  }

  template <int THREADS, class Bar>
  __device__ __forceinline__ static void receive(const Params& p, int tid, Bar&& bar) {
    receive_at_end<Dest, THREADS>(p, tid, bar);
  }

 private:
  template <int D, int SMEM_STRIDE, int THREADS>
  __device__ __forceinline__ static void send(const Params& p, Pending& pend, const uint16_t* so, int hi, int tid) {
    const int lo = pend.sent;
    send_staged_chunks<Dest, D, SMEM_STRIDE, THREADS>(p, pend.c, pend.m0, pend.dst, so, lo, hi, tid);
    if (hi > lo) pend.sent = hi;
  }

  __device__ __forceinline__ static void publish(const Params& p, Pending& pend) {
    if (!pend.valid) return;
    publish_tile<Dest>(p, Dest::flag_key(p, pend.c), Dest::destinations(p, pend.m0, pend.rows));
    pend.valid = false;
  }
};

}  // namespace xstage::remote
