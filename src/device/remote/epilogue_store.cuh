#pragma once
// Remote-store epilogue: each output row goes straight from the CTA that
// computed it to the rank the destination map names, and the CTA moves on;
// the next tile's mainloop is the gap in which the X-Stage drains (the
// paper's piggybacking). Rows are sent from the staging rows as soon as a
// warp has staged them (send.cuh: 16-byte stores or bulk copies); flags
// follow by kCompletion (publish.cuh).
//
// The epilogue contract (kernels that stage a warp's 16 output rows in
// shared memory: the attention kernels, the MoE GEMMs): every epilogue
// thread calls, per tile, mainloop_step(j) in each of the tile's steps;
// after the mainloop flush (kOwnStaging) and before_store (kBeforeStore),
// each with a barrier after; store_rows per warp once its rows are staged;
// after a barrier over the epilogue threads tile_done; at CTA exit flush,
// finish and receive. `Pending` is what a policy carries from tile to tile.
#include <cstdint>

#include "device/remote/publish.cuh"
#include "device/remote/receive.cuh"
#include "device/remote/send.cuh"
#include "device/remote/wait_trace.cuh"
#include "xstage/comm/remote_store.hpp"

namespace xstage::remote {

template <class Dest, StorePath kPath, Completion kCompletion>
struct RemoteStoreEpilogue {
  static_assert(kPath == StorePath::vector16 || kPath == StorePath::vector16_wt || kPath == StorePath::vector16_cs ||
                    kPath == StorePath::bulk,
                "RemoteStoreEpilogue sends at once; the paced paths have epilogues of their own");
  using Params = typename Dest::Params;
  using Tile = typename Dest::Tile;

  template <int D, int SMEM_STRIDE>
  __device__ __forceinline__ static void store_rows(const Params& p, const Tile& c, int row0, int S_q,
                                                    const uint16_t* srows, int lane) {
    send_warp_rows<Dest, kPath, kCompletion, D, SMEM_STRIDE>(p, c, row0, S_q, srows, lane);
  }

  __device__ __forceinline__ static void store_lse(const Params&, const Tile&, int, int, int, float) {}

  // The flags of one finished tile (thread 0's copy).
  struct Pending {
    typename Dest::FlagKey key{};
    RankRange dst{0, -1};  // empty
    uint32_t tiles = 0;    // kDiagTileTrace only: tiles this CTA has done
  };
  static constexpr bool kBeforeStore = kCompletion == Completion::lagged;
  static constexpr bool kOwnStaging = false;
  template <int D, int SMEM_STRIDE, int THREADS>
  __device__ __forceinline__ static void mainloop_step(const Params&, Pending&, const uint16_t*, int, int, int) {}
  template <int D, int SMEM_STRIDE, int THREADS>
  __device__ __forceinline__ static void flush(const Params&, Pending&, const uint16_t*, int) {}

  // Lagged: the previous tile's flags, published after this tile's mainloop
  // (a CTA barrier ago no store of this CTA was issued since the previous
  // tile's, which have had a whole mainloop to drain, so the release fence
  // has nothing left to wait for).
  __device__ __forceinline__ static void before_store(const Params& p, Pending& pend, int tid) {
    if (tid == 0) publish(p, pend);
  }

  __device__ __forceinline__ static void tile_done(const Params& p, const Tile& c, int m0, int block_m, int, int tid,
                                                   Pending& pend) {
    if constexpr (kDiagnostics) {
      if (tid == 0) trace_tile_end(p, pend.tiles++);
    }
    // At exit every flag is worked out again when the CTA has no tiles left.
    if (kCompletion == Completion::at_exit || tid != 0) return;
    pend.key = Dest::flag_key(p, c);
    pend.dst = Dest::destinations(p, m0, block_m);
    if constexpr (kCompletion == Completion::lagged) return;  // published by before_store or finish
    if constexpr (kCompletion == Completion::coupled) wait_tile_visible<Dest>(p, c, m0, pend.dst);
    publish(p, pend);
  }

  // Lagged: the CTA's last tile; its release fence waits for its drain, off
  // every other tile's path. At exit: every tile of the CTA at once; with
  // bulk copies, after each thread's copies have written their rows (ordered
  // for the generic proxy) and a barrier: a thread's release covers the
  // others' copies only through it.
  template <int THREADS, class Scheduler, class Bar>
  __device__ __forceinline__ static void finish(const Params& p, Pending& pend, const Scheduler& sched, int block_m,
                                                int, int tid, Bar&& bar) {
    if constexpr (kPath == StorePath::bulk && kCompletion == Completion::at_exit) {
      ptx::bulk_wait_group_all();
      ptx::fence_proxy_async_global();
      bar();
    }
    finish_flags<Dest, kCompletion, THREADS>(p, sched, block_m, tid, [&] { publish(p, pend); });
  }

  // After finish: the grid's last CTA waits for the receivers' flags.
  template <int THREADS, class Bar>
  __device__ __forceinline__ static void receive(const Params& p, int tid, Bar&& bar) {
    receive_at_end<Dest, THREADS>(p, tid, bar);
  }

 private:
  __device__ __forceinline__ static void publish(const Params& p, Pending& pend) {
    publish_tile<Dest>(p, pend.key, pend.dst);
    pend.dst.last = pend.dst.first - 1;  // published
  }
};

}  // namespace xstage::remote
