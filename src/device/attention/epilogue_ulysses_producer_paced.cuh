#pragma once
// The fused Ulysses epilogue with paced sends made by the producer warpgroup
// of the wgmma kernel (docs/perf-log.md, f11): StorePath::paced_bulk with TMA
// bulk copies (kBulk), StorePath::paced_warp with 16-byte stores.
//
// Why: `paced` (epilogue_ulysses_paced.cuh) spreads a tile's rows over the
// next tile's mainloop, which keeps the host path's X-Stage shallow, but it
// does so in the consumer warpgroups and costs the kernel 2-3% at 16k-32k
// even into an idle stage. Here the consumers only stage the rows (as the
// local epilogue does) and hand the buffer over; a warp of the producer
// warpgroup that loads nothing (warp 1; the loader is thread 0) sends the
// rows in slices, paced by the loader's progress, and gives the buffer back
// once it has read it: bulk copies one row a lane, or 16-byte loads from
// shared memory and stores, consecutive lanes on consecutive chunks (on the
// H200's PCIe path bulk copies drain slower than 16-byte stores). (The
// loader thread sending them itself cost more than `paced`: one thread
// issuing a slice's copies one after another held up the next loads;
// perf-log f11.)
//
// Hand-over (two mbarriers, o_full with an arrival of every consumer thread
// and o_empty of every sender lane; phase k for the CTA's k-th tile):
//   consumers: [wait o_empty, phase k-1: the copies of tile k-1 have read the
//              buffer] stage tile k's rows, fence.proxy.async (each writer:
//              the TMA unit reads what ordinary stores wrote), an arrival
//              on o_full;
//   sender:    wait o_full phase k, send tile k's slices during tile k+1's
//              KV steps, wait for the copies' reads, arrive on o_empty. The
//              CTA's last tile goes at once; the sender then waits for every
//              copy to complete (writes performed) before its o_empty
//              arrival, on which the consumers wait before they publish the
//              flags.
// Flags at exit only (Completion::at_exit): no fence on any tile's path, and
// with bulk copies the flags need every copy complete, which only the sender
// can wait for (16-byte stores: ordered by the o_empty arrival and wait, then
// the flags' release, as the other epilogues' stores by their barriers).
#include <cstdint>

#include "device/attention/epilogue_ulysses.cuh"
#include "device/ptx/mbarrier.cuh"

namespace xstage::attention {

template <bool kBulk>
struct UlyssesProducerPacedEpilogue {
  using Params = UlyssesStoreParams;
  static constexpr bool kBeforeStore = false;
  static constexpr bool kOwnStaging = false;
  // The kernel runs the hand-over above and `sender` in its producer warpgroup.
  static constexpr bool kProducerSends = true;

  // The consumers carry nothing from tile to tile.
  struct Pending {};

  // Consumers: each thread wrote part of the staged rows with st.shared; the
  // TMA unit reads them (the kernel's named barrier and o_full arrival follow).
  template <int D, int SMEM_STRIDE>
  __device__ __forceinline__ static void store_rows(const Params&, const TileCoord&, int, int, const uint16_t*, int) {
    if constexpr (kBulk) ptx::fence_proxy_async_shared();
  }
  __device__ __forceinline__ static void store_lse(const Params&, const TileCoord&, int, int, int, float) {}
  template <int D, int SMEM_STRIDE, int THREADS>
  __device__ __forceinline__ static void mainloop_step(const Params&, Pending&, const uint16_t*, int, int, int) {}
  template <int D, int SMEM_STRIDE, int THREADS>
  __device__ __forceinline__ static void flush(const Params&, Pending&, const uint16_t*, int) {}
  __device__ __forceinline__ static void before_store(const Params&, Pending&, int) {}
  __device__ __forceinline__ static void tile_done(const Params&, const TileCoord&, int, int, int, int, Pending&) {}

  // Consumers, after their wait for the sender's last o_empty arrival (every
  // copy complete, then fence.proxy.async.global by the sender): every
  // tile's flags at once (a release store is cumulative over that wait).
  template <int THREADS, class Scheduler, class Bar>
  __device__ __forceinline__ static void finish(const Params& p, Pending&, const Scheduler& sched, int block_m, int,
                                                int tid, Bar&&) {
    ulysses_detail::publish_every_tile<THREADS>(p, sched, block_m, tid);
  }

  template <int THREADS, class Bar>
  __device__ __forceinline__ static void receive(const Params& p, int tid, Bar&& bar) {
    ulysses_receive_at_end<THREADS>(p, tid, bar);
  }

  // ---- the sender: warp 1 of the producer warpgroup (all 32 lanes)
  //
  // Walks the CTA's tiles as the loader does. Tile k's rows are sent in
  // slices during tile k+1's KV steps: slice i once the loader has issued
  // the loads of step (i + 1) interval - 1 of tile k+1 (`progress`, the KV
  // steps the loader has issued, counted over the CTA's tiles; it only
  // grows, so a late sender never waits for a step that has passed). The
  // loader runs at most STAGES steps ahead of the consumers, so the slices
  // go out at the consumers' pace. The CTA's last tile is sent at once.
  // The slices are `paced`'s (paced_plan): the last one goes by step n - 1
  // of tile k+1, before the consumers, at the end of that tile, wait for the
  // buffer.
  template <int D, int SMEM_STRIDE, class Scheduler>
  __device__ __forceinline__ static void sender(const Params& p, const Scheduler& sched, int n_kv, int block_m,
                                                const uint16_t* so, uint64_t* o_full, uint64_t* o_empty,
                                                uint32_t* progress, int lane) {
    const uint32_t tiles = uint32_t(sched.num_tiles());
    uint32_t k = 0;
    for (uint32_t t = blockIdx.x; t < tiles; t += gridDim.x, ++k) {
      const TileCoord c = sched.tile32(t);
      const int m0 = c.m_block * block_m;
      const int rows = int(m0 + block_m < p.S ? block_m : p.S - m0);
      const ulysses_detail::RowRun dst = ulysses_detail::row_run(p, c, m0, rows, p.head_dim);
      ptx::mbar_wait(o_full, k & 1);  // the consumers staged tile k's rows
      if (t + gridDim.x >= tiles) {   // the CTA's last tile: at once, then every copy complete
        send<D, SMEM_STRIDE>(p, c, m0, dst, so, 0, rows, lane);
        if constexpr (kBulk) {
          ptx::bulk_wait_group_all();       // this lane's copies performed their writes ...
          ptx::fence_proxy_async_global();  // ... ordered before the generic proxy's flags
        }
        ptx::mbar_arrive(o_empty);  // every lane: the consumers publish the flags after all 32
        return;
      }
      const auto [interval, slice] = ulysses_detail::paced_plan(rows, p.paced_min_rows, n_kv);
      const uint32_t base = (k + 1) * uint32_t(n_kv);  // tile k+1's first step
      for (int i = 0, lo = 0; lo < rows; ++i, lo += slice) {
        const uint32_t due = base + uint32_t((i + 1) * interval);  // step (i+1) interval - 1 issued
        if (lane == 0)
          while (atomicAdd_block(progress, 0u) < due) __nanosleep(128);
        __syncwarp();
        send<D, SMEM_STRIDE>(p, c, m0, dst, so, lo, lo + slice < rows ? lo + slice : rows, lane);
      }
      if constexpr (kBulk) ptx::bulk_wait_group_read_all();  // this lane's copies have read the buffer
      ptx::mbar_arrive(o_empty);  // every lane: the consumers may stage tile k+1 after all 32
    }
  }

 private:
  // Rows [lo, hi) of a tile (a row is contiguous in its destination,
  // consecutive rows are H D elements apart): one bulk copy a row and lane,
  // or 16-byte chunks, consecutive lanes on consecutive chunks.
  template <int D, int SMEM_STRIDE>
  __device__ __forceinline__ static void send(const Params& p, const TileCoord& c, int m0,
                                              const ulysses_detail::RowRun& dst, const uint16_t* so, int lo, int hi,
                                              int lane) {
    static_assert((D * 2) % 16 == 0 && (SMEM_STRIDE * 2) % 16 == 0,
                  "bulk copies and 16-byte stores need 16-byte multiples and 16-byte aligned rows");
    if constexpr (kBulk) {
      for (int r = lo + lane; r < hi; r += 32) {
        uint16_t* row = dst.covers(r) ? dst.base + int64_t(r) * dst.pitch
                                      : ulysses_detail::row_address(p, c, int64_t(m0) + r, D);
        ptx::bulk_store_s2g(row, so + r * SMEM_STRIDE, D * 2);
      }
      ptx::bulk_commit_group();
    } else {
      ulysses_detail::store_staged_chunks<D, SMEM_STRIDE, 32>(p, c, m0, dst, so, lo, hi, lane);
    }
  }
};

}  // namespace xstage::attention
