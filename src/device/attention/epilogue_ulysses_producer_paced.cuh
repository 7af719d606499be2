#pragma once
// The fused Ulysses epilogue with paced sends made by the producer warpgroup
// of the wgmma kernel (StorePath::paced_bulk; docs/perf-log.md, f11).
//
// Why: `paced` (epilogue_ulysses_paced.cuh) spreads a tile's rows over the
// next tile's mainloop, which keeps the host path's X-Stage shallow, but it
// does so in the consumer warpgroups: its per-step check, its sends between
// the GEMMs and its state in their registers cost the kernel 2-3% at
// 16k-32k even into an idle stage. Here the consumers only stage the rows (as
// the local epilogue does) and hand the buffer over; the producer's TMA
// thread, which walks the next tile's KV steps anyway, sends the rows in
// slices with TMA bulk copies between its loads, and gives the buffer back
// once the copies have read it. The consumers' mainloop is attention-only's.
//
// Hand-over (two mbarriers of one arrival each, o_full and o_empty, phase k
// for the CTA's k-th tile):
//   consumers: [wait o_empty, phase k-1: the copies of tile k-1 have read the
//              buffer] stage tile k's rows, fence.proxy.async (each writer:
//              the TMA unit reads what ordinary stores wrote), named barrier,
//              one arrival on o_full;
//   producer:  at the first slice of tile k (during tile k+1's KV steps)
//              wait o_full phase k; after the last slice wait for the copies'
//              reads, arrive on o_empty. The CTA's last tile is sent when the
//              producer has no tiles left; it then waits for every copy to
//              complete (writes performed) before its o_empty arrival, on
//              which the consumers wait before they publish the flags.
// Flags at exit only (Completion::at_exit): no fence on any tile's path, and
// the flags need every copy complete, which only the producer can wait for.
#include <cstdint>

#include "device/attention/epilogue_ulysses.cuh"
#include "device/ptx/mbarrier.cuh"

namespace xstage::attention {

struct UlyssesProducerPacedEpilogue {
  using Params = UlyssesStoreParams;
  static constexpr bool kBeforeStore = false;
  static constexpr bool kOwnStaging = false;
  // The kernel runs the hand-over above and calls the producer_* members.
  static constexpr bool kProducerSends = true;

  // The consumers carry nothing from tile to tile.
  struct Pending {};

  // The producer thread's copy of the tile whose rows wait in the staging buffer.
  struct Sender {
    TileCoord c{0, 0, 0};
    int m0 = 0;
    int rows = 0;  // rows of the tile (BLOCK_M, fewer at the end of the sequence)
    int sent = 0;  // rows sent so far
    bool valid = false;
    uint32_t tiles = 0;  // tiles handed over so far: the pending one is tiles - 1
    ulysses_detail::RowRun dst{nullptr, 0, 0};
    // `slice` rows every `interval` KV steps, the next at step `next_step` (-1: none due).
    int next_step = -1, interval = 1, slice = 0;
  };

  // Consumers: each thread wrote part of the staged rows with st.shared; the
  // TMA unit reads them (the kernel's named barrier and o_full arrival follow).
  template <int D, int SMEM_STRIDE>
  __device__ __forceinline__ static void store_rows(const Params&, const TileCoord&, int, int, const uint16_t*, int) {
    ptx::fence_proxy_async_shared();
  }
  __device__ __forceinline__ static void store_lse(const Params&, const TileCoord&, int, int, int, float) {}
  template <int D, int SMEM_STRIDE, int THREADS>
  __device__ __forceinline__ static void mainloop_step(const Params&, Pending&, const uint16_t*, int, int, int) {}
  template <int D, int SMEM_STRIDE, int THREADS>
  __device__ __forceinline__ static void flush(const Params&, Pending&, const uint16_t*, int) {}
  __device__ __forceinline__ static void before_store(const Params&, Pending&, int) {}
  __device__ __forceinline__ static void tile_done(const Params&, const TileCoord&, int, int, int, int, Pending&) {}

  // Consumers, after their wait for the producer's last o_empty arrival (every
  // copy complete, then fence.proxy.async.global by the producer): every
  // tile's flags at once (a release store is cumulative over that wait).
  template <int THREADS, class Scheduler>
  __device__ __forceinline__ static void finish(const Params& p, Pending&, const Scheduler& sched, int block_m, int,
                                                int tid) {
    ulysses_detail::publish_every_tile<THREADS>(p, sched, block_m, tid);
  }

  template <int THREADS, class Bar>
  __device__ __forceinline__ static void receive(const Params& p, int tid, Bar&& bar) {
    ulysses_receive_at_end<THREADS>(p, tid, bar);
  }

  // ---- producer (its TMA thread)

  // Before the loads of a tile with n KV steps: the plan for the pending
  // tile's rows, m = min(n, ceil(rows / paced_min_rows)) slices of
  // ceil(rows / m) rows, n / m steps apart, the last at step m (n / m) - 1.
  __device__ __forceinline__ static void producer_plan(const Params& p, Sender& s, int n) {
    if (!s.valid) return;
    const int most = (s.rows + p.paced_min_rows - 1) / p.paced_min_rows;
    const int m = most < n ? most : n;
    s.interval = n / m;
    s.slice = (s.rows + m - 1) / m;
    s.next_step = s.interval - 1;
  }

  // After the loads of KV step j: a slice, if one is due.
  template <int D, int SMEM_STRIDE>
  __device__ __forceinline__ static void producer_step(const Params& p, Sender& s, const uint16_t* so, int j,
                                                       uint64_t* o_full, uint64_t* o_empty) {
    if (j != s.next_step) return;
    const int hi = s.rows - s.sent > s.slice ? s.sent + s.slice : s.rows;
    send<D, SMEM_STRIDE>(p, s, so, hi, o_full);
    if (hi < s.rows) {
      s.next_step += s.interval;
      return;
    }
    s.next_step = -1;
    ptx::bulk_wait_group_read_all();  // the copies have read the buffer: the consumers may stage again
    ptx::mbar_arrive(o_empty);
    s.valid = false;
  }

  // After a tile's loads: it is the pending one (the previous one's last
  // slice went at step n - 1 at the latest).
  __device__ __forceinline__ static void producer_tile_loaded(const Params& p, Sender& s, const TileCoord& c,
                                                              int block_m) {
    s.c = c;
    s.m0 = c.m_block * block_m;
    s.rows = int(s.m0 + block_m < p.S ? block_m : p.S - s.m0);
    s.sent = 0;
    s.valid = true;
    s.next_step = -1;  // planned with the next tile's loads
    s.dst = ulysses_detail::row_run(p, c, s.m0, s.rows, p.head_dim);
    ++s.tiles;
  }

  // No tiles left: the last tile's rows, then every copy complete before the
  // last o_empty arrival (the consumers publish the flags after it).
  template <int D, int SMEM_STRIDE>
  __device__ __forceinline__ static void producer_finish(const Params& p, Sender& s, const uint16_t* so,
                                                         uint64_t* o_full, uint64_t* o_empty) {
    if (!s.valid) return;  // a CTA with no tiles: nobody waits
    send<D, SMEM_STRIDE>(p, s, so, s.rows, o_full);
    ptx::bulk_wait_group_all();        // every copy of the CTA performed its writes ...
    ptx::fence_proxy_async_global();   // ... ordered before the generic proxy's flags
    ptx::mbar_arrive(o_empty);
    s.valid = false;
  }

 private:
  // Rows [sent, hi) of the pending tile, one bulk copy a row (a row is
  // contiguous in its destination, consecutive rows are H D elements apart).
  template <int D, int SMEM_STRIDE>
  __device__ __forceinline__ static void send(const Params& p, Sender& s, const uint16_t* so, int hi,
                                              uint64_t* o_full) {
    static_assert((D * 2) % 16 == 0 && (SMEM_STRIDE * 2) % 16 == 0,
                  "bulk copies need 16-byte multiples and 16-byte aligned rows");
    if (s.sent == 0) ptx::mbar_wait(o_full, (s.tiles - 1) & 1);  // the consumers staged the rows
    for (int r = s.sent; r < hi; ++r) {
      uint16_t* row = s.dst.covers(r) ? s.dst.base + int64_t(r) * s.dst.pitch
                                      : ulysses_detail::row_address(p, s.c, int64_t(s.m0) + r, D);
      ptx::bulk_store_s2g(row, so + r * SMEM_STRIDE, D * 2);
    }
    ptx::bulk_commit_group();
    s.sent = hi;
  }
};

}  // namespace xstage::attention
