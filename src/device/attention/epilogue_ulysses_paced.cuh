#pragma once
// The fused Ulysses epilogue with paced sends: a tile's rows are staged in
// shared memory of their own and sent in slices during the CTA's *next* tile's
// mainloop, at most one slice per KV step, so that each SM adds its bytes to the
// X-Stage at a steady rate instead of a whole tile at once.
//
// Why (docs/perf-log.md, f3): on the H200's host path a tile's stores issued
// at once did not overlap the next tile's mainloop, whatever the flag timing
// (eager, lagged, at exit): the fused kernel ran as slow as attention followed
// by the all-to-all. Slices of at least paced_min_rows rows (16 by default:
// 4 KiB an SM at D = 128), evenly spaced over the KV steps, keep what each SM
// has queued small.
//
// Completion lagged: once all slices of a tile are sent and the CTA has
// passed a barrier (after the next tile's mainloop), thread 0 sets its flags
// (st.release.sys); the CTA's last tile is sent and flagged at exit. At exit:
// every tile's flags when the CTA has no tiles left (no fence per tile).
#include <cstdint>

#include "device/attention/epilogue_ulysses.cuh"

namespace xstage::attention {

template <Completion kCompletion>
struct UlyssesPacedEpilogue {
  static_assert(kCompletion == Completion::lagged || kCompletion == Completion::at_exit,
                "the paced path publishes its flags lagged or at exit");
  using Params = UlyssesStoreParams;

  // The tile whose rows wait in the staging buffer, in shared memory: thread
  // 0 writes it in tile_done, between two CTA barriers of the kernel, and
  // every thread reads it until the next tile_done. Only what changes at a
  // send stays in registers (Pending): the consumers' mainloop is short of
  // registers, and the first version, which kept all of this in every
  // thread's registers, made the compiler reload parameters and rebuild
  // thread ids at every KV step (+5% instructions at S = 16k; perf-log f9).
  struct StagedTile {
    TileCoord c;
    int m0, rows;  // first row, rows of the tile (BLOCK_M, fewer at the end of the sequence)
    // Where the rows go, worked out once a tile (a 64-bit division per 16-byte
    // chunk, or per KV step, costs the wgmma kernel's consumers more than the
    // stores themselves; docs/perf-log.md, f6).
    ulysses_detail::RowRun dst;
  };
  __device__ __forceinline__ static StagedTile& staged() {
    __shared__ StagedTile tile;
    return tile;
  }
  struct Pending {
    int next_step = -1;  // KV step of the next send (0 after tile_done: plan at step 0; -1: none due)
    int sent = 0;        // rows of the staged tile sent so far
    bool valid = false;  // a tile is staged (and, lagged, its flags not yet published)
  };
  static constexpr bool kBeforeStore = kCompletion == Completion::lagged;
  static constexpr bool kOwnStaging = true;

  // The kernel staged the rows in the epilogue's own buffer; they are sent later.
  template <int D, int SMEM_STRIDE>
  __device__ __forceinline__ static void store_rows(const Params&, const TileCoord&, int, int, const uint16_t*, int) {}
  __device__ __forceinline__ static void store_lse(const Params&, const TileCoord&, int, int, int, float) {}

  // KV step j of n of the next tile. The plan, from the rows and n alone: m
  // = min(n, ceil(rows / paced_min_rows)) sends of ceil(rows / m) rows, n / m
  // steps apart, the first at step n / m - 1, the last at m (n / m) - 1 <= n
  // - 1. Sends of at least paced_min_rows rows, because the per-step
  // bookkeeping of the first version (rows due at every step) cost the wgmma
  // kernel ~40 instructions a warp a step, 4-5% of it (docs/perf-log.md,
  // f8). A step that sends nothing costs one comparison.
  template <int D, int SMEM_STRIDE, int THREADS>
  __device__ __forceinline__ static void mainloop_step(const Params& p, Pending& pend, const uint16_t* so, int j,
                                                       int n, int tid) {
    if (j != pend.next_step) return;
    const int rows = staged().rows;
    const int most = (rows + p.paced_min_rows - 1) / p.paced_min_rows;
    const int m = most < n ? most : n;
    const int interval = n / m;
    if (j == 0 && interval > 1) {  // tile_done asked for the plan
      pend.next_step = interval - 1;
      return;
    }
    const int slice = (rows + m - 1) / m;
    const int hi = rows - pend.sent > slice ? pend.sent + slice : rows;
    send<D, SMEM_STRIDE, THREADS>(p, pend, so, hi, tid);
    pend.next_step = hi < rows ? j + interval : -1;
  }

  // The KV step, j or later, at which mainloop_step has a send to make; n if
  // none before the tile's mainloop ends. The wgmma kernel runs the steps
  // before it without calling mainloop_step.
  __device__ __forceinline__ static int next_send_step(const Pending& pend, int j, int n) {
    return pend.next_step >= j ? pend.next_step : n;
  }

  // Whatever is left of the pending tile. The kernel then synchronises its
  // epilogue threads (the whole CTA, or the consumer warpgroups of the wgmma
  // kernel, whose producer has exited): every thread is done reading the
  // staging buffer and every row is stored before the flags.
  template <int D, int SMEM_STRIDE, int THREADS>
  __device__ __forceinline__ static void flush(const Params& p, Pending& pend, const uint16_t* so, int tid) {
    if (pend.valid) send<D, SMEM_STRIDE, THREADS>(p, pend, so, staged().rows, tid);
    pend.next_step = -1;
  }

  // After flush: the pending tile's flags (lagged).
  __device__ __forceinline__ static void before_store(const Params& p, Pending& pend, int tid) {
    if (tid == 0) publish(p, pend);
  }

  __device__ __forceinline__ static void tile_done(const Params& p, const TileCoord& c, int m0, int block_m, int,
                                                   int tid, Pending& pend) {
    pend.sent = 0;
    pend.valid = true;
    pend.next_step = 0;  // planned at the next tile's first KV step
    if (tid == 0) {
      const int rows = int(m0 + block_m < p.S ? block_m : p.S - m0);
      staged() = {c, m0, rows, ulysses_detail::row_run(p, c, m0, rows, p.head_dim)};
    }
  }

  // After the last flush: the CTA's last tile.
  template <int THREADS, class Scheduler>
  __device__ __forceinline__ static void finish(const Params& p, Pending& pend, const Scheduler& sched, int block_m,
                                                int, int tid) {
    ulysses_detail::finish_flags<kCompletion, THREADS>(p, sched, block_m, tid, [&] { publish(p, pend); });
  }

  template <int THREADS, class Bar>
  __device__ __forceinline__ static void receive(const Params& p, int tid, Bar&& bar) {
    ulysses_receive_at_end<THREADS>(p, tid, bar);
  }

 private:
  template <int D, int SMEM_STRIDE, int THREADS>
  __device__ __forceinline__ static void send(const Params& p, Pending& pend, const uint16_t* so, int hi, int tid) {
    constexpr int CHUNKS_PER_ROW = D / 8;  // 16-byte chunks; consecutive threads on consecutive chunks
    const StagedTile& t = staged();
    const int lo = pend.sent;
    const int chunks = (hi - lo) * CHUNKS_PER_ROW;
    for (int k = tid; k < chunks; k += THREADS) {
      const int r = lo + k / CHUNKS_PER_ROW, col = (k % CHUNKS_PER_ROW) * 8;
      const uint4 v = *reinterpret_cast<const uint4*>(so + r * SMEM_STRIDE + col);
      uint16_t* row = t.dst.covers(r) ? t.dst.base + int64_t(r) * t.dst.pitch
                                      : ulysses_detail::row_address(p, t.c, int64_t(t.m0) + r, D);
      ptx::st_global_v4_b32(row + col, v);
    }
    if (hi > lo) pend.sent = hi;
  }

  __device__ __forceinline__ static void publish(const Params& p, Pending& pend) {
    if (!pend.valid) return;
    const StagedTile& t = staged();
    const RankRange dst = ulysses_detail::tile_owners(p, t.m0, t.rows);
    const int src = p.rank_base + t.c.b / p.batch, b = t.c.b % p.batch;
    const int64_t idx = ulysses_flag_index(src, b, t.c.h, t.c.m_block, p.batch, p.heads_per_rank, p.m_blocks);
    for (int d = dst.first; d <= dst.last; ++d)
      ptx::st_release_sys_u64(p.flags[d] + idx, p.epoch);
    pend.valid = false;
  }
};

}  // namespace xstage::attention
