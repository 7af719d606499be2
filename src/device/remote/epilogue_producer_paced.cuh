#pragma once
// Remote-store epilogue with paced sends made by a warp of a warp-specialised
// kernel's producer warpgroup (perf-log f11): StorePath::paced_bulk with TMA
// bulk copies (kBulk), StorePath::paced_warp with 16-byte stores.
//
// Why: `paced` (epilogue_paced.cuh) spreads a tile's rows over the next
// tile's mainloop, which keeps the host path's X-Stage shallow, but it does
// so in the consumer warpgroups and costs the kernel 2-3% at 16k-32k even
// into an idle stage. Here the consumers only stage the rows and hand the
// buffer over; a producer warp that loads nothing (warp 1; the loader is
// thread 0) sends the rows in slices, paced by the loader's progress, and
// gives the buffer back once it has read it: bulk copies one row a lane, or
// 16-byte loads from shared memory and stores, consecutive lanes on
// consecutive chunks (on the H200's PCIe path bulk copies drain slower than
// 16-byte stores). The loader thread sending them itself cost more than
// `paced`: one thread issuing a slice's copies one after another held up the
// next loads (perf-log f11).
//
// Hand-over: the kernel's one-slot o_ring (pipeline/stage_ring.cuh), use k
// for the CTA's k-th tile, filled by every consumer thread, released by every
// sender lane:
//   consumers: [acquire use k: the copies of tile k-1 have read the buffer]
//              stage tile k's rows, fence.proxy.async (each writer: the TMA
//              unit reads what ordinary stores wrote), commit;
//   sender:    wait for use k, send tile k's slices during tile k+1's
//              steps, wait for the copies' reads, release. The CTA's last
//              tile goes at once; the sender then waits for every copy to
//              complete (writes performed) before its release, on which the
//              consumers wait before they publish the flags.
// Flags at exit only (Completion::at_exit): no fence on any tile's path, and
// with bulk copies the flags need every copy complete, which only the sender
// can wait for (16-byte stores: ordered by the o_empty arrival and wait, then
// the flags' release).
#include <cstdint>

#include "device/pipeline/stage_ring.cuh"
#include "device/remote/publish.cuh"
#include "device/remote/receive.cuh"
#include "device/remote/send.cuh"

namespace xstage::remote {

template <class Dest, bool kBulk>
struct RemoteProducerPacedEpilogue {
  using Params = typename Dest::Params;
  using Tile = typename Dest::Tile;
  static constexpr bool kBeforeStore = false;
  static constexpr bool kOwnStaging = false;
  // The kernel runs the hand-over above and `sender` in its producer warpgroup.
  static constexpr bool kProducerSends = true;

  // The consumers carry nothing from tile to tile.
  struct Pending {};

  // Consumers: each thread wrote part of the staged rows with st.shared; the
  // TMA unit reads them (the kernel's named barrier and o_full arrival follow).
  template <int D, int SMEM_STRIDE>
  __device__ __forceinline__ static void store_rows(const Params&, const Tile&, int, int, const uint16_t*, int) {
    if constexpr (kBulk) ptx::fence_proxy_async_shared();
  }
  __device__ __forceinline__ static void store_lse(const Params&, const Tile&, int, int, int, float) {}
  template <int D, int SMEM_STRIDE, int THREADS>
  __device__ __forceinline__ static void mainloop_step(const Params&, Pending&, const uint16_t*, int, int, int) {}
  template <int D, int SMEM_STRIDE, int THREADS>
  __device__ __forceinline__ static void flush(const Params&, Pending&, const uint16_t*, int) {}
  __device__ __forceinline__ static void before_store(const Params&, Pending&, int) {}
  __device__ __forceinline__ static void tile_done(const Params&, const Tile&, int, int, int, int, Pending&) {}

  // Consumers, after their wait for the sender's last o_empty arrival (every
  // copy complete, then fence.proxy.async.global by the sender): every
  // tile's flags at once (a release store is cumulative over that wait).
  template <int THREADS, class Scheduler, class Bar>
  __device__ __forceinline__ static void finish(const Params& p, Pending&, const Scheduler& sched, int block_m, int,
                                                int tid, Bar&&) {
    publish_every_tile<Dest, THREADS>(p, sched, block_m, tid);
  }

  template <int THREADS, class Bar>
  __device__ __forceinline__ static void receive(const Params& p, int tid, Bar&& bar) {
    receive_at_end<Dest, THREADS>(p, tid, bar);
  }

  // ---- the sender: one warp of the producer warpgroup (all 32 lanes)
  //
  // Walks the CTA's tiles as the loader does. Tile k's rows are sent in
  // slices during tile k+1's steps: slice i once the loader has issued the
  // loads of step (i + 1) interval - 1 of tile k+1 (`progress`, the steps the
  // loader has issued, counted over the CTA's tiles; it only grows, so a late
  // sender never waits for a step that has passed). The loader runs at most
  // STAGES steps ahead of the consumers, so the slices go out at the
  // consumers' pace. The CTA's last tile is sent at once. The slices are
  // `paced`'s (paced_plan): the last one goes by step n - 1 of tile k+1,
  // before the consumers, at the end of that tile, wait for the buffer.
  template <int D, int SMEM_STRIDE, class Scheduler>
  __device__ __forceinline__ static void sender(const Params& p, const Scheduler& sched, int n_steps, int block_m,
                                                const uint16_t* so, const pipeline::StageRing<1>& o_ring,
                                                uint32_t* progress, int lane) {
    uint32_t k = 0;
    // 32-bit walk: the host checks the tile count fits.
    const auto walk = sched.template walk<uint32_t>();
    for (auto w = walk.template first<uint32_t>(); walk.valid(w); w = walk.next(w), ++k) {
      const Tile c = sched.coord(w);
      const int m0 = int(Dest::first_row(c, block_m));
      const int rows = Dest::tile_rows(p, m0, block_m);
      const RowRun dst = Dest::rows(p, c).run(m0, rows);
      o_ring.wait(k);  // the consumers staged tile k's rows
      if (walk.is_last(w)) {         // the CTA's last tile: at once, then every copy complete
        send<D, SMEM_STRIDE>(p, c, m0, dst, so, 0, rows, lane);
        if constexpr (kBulk) {
          ptx::bulk_wait_group_all();       // this lane's copies performed their writes ...
          ptx::fence_proxy_async_global();  // ... ordered before the generic proxy's flags
        }
        o_ring.release(0);  // every lane: the consumers publish the flags after all 32
        return;
      }
      const auto [interval, slice] = paced_plan(rows, p.paced_min_rows, n_steps);
      const uint32_t base = (k + 1) * uint32_t(n_steps);  // tile k+1's first step
      for (int i = 0, lo = 0; lo < rows; ++i, lo += slice) {
        const uint32_t due = base + uint32_t((i + 1) * interval);  // step (i+1) interval - 1 issued
        if (lane == 0)
          while (atomicAdd_block(progress, 0u) < due) __nanosleep(128);
        __syncwarp();
        send<D, SMEM_STRIDE>(p, c, m0, dst, so, lo, lo + slice < rows ? lo + slice : rows, lane);
      }
      if constexpr (kBulk) ptx::bulk_wait_group_read_all();  // this lane's copies have read the buffer
      o_ring.release(0);  // every lane: the consumers may stage tile k+1 after all 32
    }
  }

 private:
  template <int D, int SMEM_STRIDE>
  __device__ __forceinline__ static void send(const Params& p, const Tile& c, int m0, const RowRun& dst,
                                              const uint16_t* so, int lo, int hi, int lane) {
    static_assert((D * 2) % 16 == 0 && (SMEM_STRIDE * 2) % 16 == 0,
                  "bulk copies and 16-byte stores need 16-byte multiples and 16-byte aligned rows");
    if constexpr (kBulk)
      send_staged_rows_bulk<Dest, D, SMEM_STRIDE>(p, c, m0, dst, so, lo, hi, lane);
    else
      send_staged_chunks<Dest, D, SMEM_STRIDE, 32>(p, c, m0, dst, so, lo, hi, lane);
  }
};

}  // namespace xstage::remote
