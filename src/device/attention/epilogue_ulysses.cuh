#pragma once
// The fused Ulysses all-to-all epilogue (the paper's FlashAttention-A2A
// "piggybacking"): each output row goes straight from the CTA that computed
// it to the rank that owns its sequence position, at this rank's head offset,
// and the CTA moves on; the next tile's Q-loop is the gap in which the
// X-Stage drains. A tile straddling a shard boundary is split row by row.
//
// Completion: thread 0 sets one flag per destination a tile touched
// (st.release.sys, cumulative over the CTA barrier after the stores) to the
// run's epoch; the receiver waits on its flags with acquire loads and a
// timeout (ulysses_wait.cuh). When (Completion, ulysses_params.hpp):
//   lagged   just before the CTA's next tile's stores, the last tile's at CTA
//            exit. A release is a system-scope fence, and on a posted-write
//            path a fence returns only when the writes queued before it have
//            drained: published right after the stores it would make every
//            tile wait for its own drain (eager, measured in docs/perf-log.md).
//   eager    right after the tile's stores.
//   at_exit  all of a CTA's flags when it has no tiles left, by all its
//            epilogue threads at once (no fence on any tile's path;
//            receivers learn of every tile at the end).
//   coupled  after fence.sc.sys and a system-scope load of a stored word in
//            every destination (the read cannot return before the writes
//            queued ahead of it on the same path): the tile's stores are
//            remotely visible before its SM moves on - the
//            completion-coupled counterfactual made real.
//
// Store paths (both measured; docs/design/ulysses.md):
//   StorePath::vector16  each lane stores 16-byte chunks of the staged rows
//                        from registers (st.global.v4), rows spread over lanes;
//                        _wt and _cs: the same with the write-through or the
//                        streaming cache operator;
//   StorePath::bulk      lanes 0..15 each send one staged row with a TMA bulk
//                        copy (cp.async.bulk shared -> global). Before the
//                        barrier each waits until its copies have read the
//                        staged rows; the flag must not overtake the data, and
//                        a release does not cover the async proxy, so with a
//                        tile's flags right behind it (eager, lagged, coupled)
//                        it waits until they have written them, while at exit
//                        that wait comes once, in finish, before the flags.
//                        (Measured, perf-log f13: a few tenths of a point at
//                        S = 4096 with device buffers, nothing on PCIe.)
#include <cstdint>

#include "device/attention/epilogue_local.cuh"
#include "device/attention/tile_scheduler.cuh"
#include "device/attention/ulysses_params.hpp"
#include "device/attention/ulysses_wait.cuh"
#include "device/ptx/bulk_copy.cuh"
#include "device/ptx/fence.cuh"
#include "device/ptx/flags.cuh"
#include "device/ptx/store.cuh"

namespace xstage::attention {

namespace ulysses_detail {

struct RowTarget {
  int64_t S_d;    // rows of the destination's shard
  int64_t local;  // row within it
  int d;          // destination rank
};

// The rank that owns a row. Rows, S and the chunk fit in 31 bits (the host
// checks S, which the kernels carry as int): a 32-bit division is a few
// instructions, the 64-bit one a long software routine on the epilogue's
// critical path (docs/perf-log.md, f7).
__device__ __forceinline__ int owner_of_row(const UlyssesStoreParams& p, int64_t row) {
  return int(uint32_t(row) / uint32_t(p.chunk));
}

// The ranks a tile's rows [m0, min(m0 + rows, S)) go to (ulysses_tile_destinations, in 32 bits).
__device__ __forceinline__ RankRange tile_owners(const UlyssesStoreParams& p, int64_t m0, int rows) {
  const int64_t last_row = (m0 + rows < p.S ? m0 + rows : p.S) - 1;
  return {owner_of_row(p, m0), owner_of_row(p, last_row)};
}

__device__ __forceinline__ RowTarget row_target(const UlyssesStoreParams& p, int64_t row) {
  RowTarget t;
  t.d = owner_of_row(p, row);
  const int64_t begin = int64_t(t.d) * p.chunk;
  t.local = row - begin;
  const int64_t end = begin + p.chunk < p.S ? begin + p.chunk : p.S;
  t.S_d = end - begin;
  return t;
}

// Element pointer of (row, head of tile c) in its destination's shard.
__device__ __forceinline__ uint16_t* row_address(const UlyssesStoreParams& p, const TileCoord& c, int64_t row,
                                                 int D) {
  const int src = p.rank_base + c.b / p.batch, b = c.b % p.batch;
  const int H_total = p.P * p.heads_per_rank;
  const int hg = src * p.heads_per_rank + c.h;
  const RowTarget t = row_target(p, row);
  uint16_t* base = static_cast<uint16_t*>(p.out[t.d]);
  return base + ((int64_t(b) * t.S_d + t.local) * H_total + hg) * D;
}

// The flag stream (source rank, b, head) of tile c (ulysses_params.hpp).
__device__ __forceinline__ int64_t tile_stream(const UlyssesStoreParams& p, const TileCoord& c) {
  return ulysses_stream_index(p.rank_base + c.b / p.batch, c.b % p.batch, c.h, p.batch, p.heads_per_rank);
}

// Sets the flag of (stream, m-block) in destination d to this run's epoch,
// releasing every store the CTA barrier before it ordered.
__device__ __forceinline__ void publish_flag(const UlyssesStoreParams& p, int d, int64_t stream, int m_block) {
  ptx::st_release_sys_u64(p.flags[d] + ulysses_flag_index(stream, m_block, d, p.block_m, p.chunk, p.flag_stride),
                          p.epoch);
}

// Consecutive rows from row0 (of one tile or one warp): the first `run` of
// them go to row0's destination at base + r * pitch; the others (a run that
// straddles a shard boundary) need row_address. One 64-bit division for the
// run instead of one for every 16-byte chunk.
struct RowRun {
  uint16_t* base;
  int64_t pitch;  // elements between consecutive rows of a destination shard
  int run;
  __device__ __forceinline__ bool covers(int r) const { return r < run; }
};

__device__ __forceinline__ RowRun row_run(const UlyssesStoreParams& p, const TileCoord& c, int64_t row0, int rows,
                                          int D) {
  // A warp's rows may start past S (the sequence's last tile): no row of it
  // is stored, and row0 / chunk would index past the P destinations.
  if (row0 >= p.S) return {nullptr, 0, 0};
  const RowTarget t = row_target(p, row0);
  const int64_t left = t.S_d - t.local;
  return {row_address(p, c, row0, D), int64_t(p.P) * p.heads_per_rank * D, int(left < rows ? left : rows)};
}

// The paced paths' plan for a tile's `rows` rows over the next tile's n KV
// steps: m = min(n, ceil(rows / min_rows)) slices of ceil(rows / m) rows, n / m
// steps apart, the last at step m (n / m) - 1 <= n - 1.
struct PacedPlan {
  int interval, slice;
};
__device__ __forceinline__ PacedPlan paced_plan(int rows, int min_rows, int n) {
  const int most = (rows + min_rows - 1) / min_rows;
  const int m = most < n ? most : n;
  return {n / m, (rows + m - 1) / m};
}

// Staged rows [lo, hi) of tile c (first row m0) to their destinations in
// 16-byte chunks, thread tid of THREADS, consecutive threads on consecutive
// chunks of a row.
template <int D, int SMEM_STRIDE, int THREADS>
__device__ __forceinline__ void store_staged_chunks(const UlyssesStoreParams& p, const TileCoord& c, int m0,
                                                    const RowRun& dst, const uint16_t* so, int lo, int hi, int tid) {
  constexpr int CHUNKS_PER_ROW = D / 8;
  const int chunks = (hi - lo) * CHUNKS_PER_ROW;
  for (int k = tid; k < chunks; k += THREADS) {
    const int r = lo + k / CHUNKS_PER_ROW, col = (k % CHUNKS_PER_ROW) * 8;
    const uint4 v = *reinterpret_cast<const uint4*>(so + r * SMEM_STRIDE + col);
    uint16_t* row = dst.covers(r) ? dst.base + int64_t(r) * dst.pitch : row_address(p, c, int64_t(m0) + r, D);
    ptx::st_global_v4_b32(row + col, v);
  }
}

// A system-scope load: served by the memory that owns the address, not a cache.
__device__ __forceinline__ uint32_t ld_relaxed_sys_u32(const void* p) {
  uint32_t v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Completion::at_exit: every tile of the CTA (the scheduler walked again),
// the k-th by epilogue thread k % THREADS, all at once: a release store is a
// fence of its own thread, cumulative over the barrier every thread passed
// after its stores. (One thread walking them all cost a dependent table load
// and flag store per tile at the kernel's very end: ~1.2% of the kernel at
// S = 4096; docs/perf-log.md, f8.)
template <int THREADS, class Scheduler>
__device__ __forceinline__ void publish_every_tile(const UlyssesStoreParams& p, const Scheduler& sched, int block_m,
                                                   int tid) {
  // 32-bit tile indices (the host checks the count fits): at the kernel's
  // very end the 64-bit divisions of tile(t) are on its critical path.
  const uint32_t step = uint32_t(THREADS) * gridDim.x, tiles = uint32_t(sched.num_tiles());
  for (uint32_t t = blockIdx.x + uint32_t(tid) * gridDim.x; t < tiles; t += step) {
    const TileCoord c = sched.tile32(t);
    const RankRange dst = tile_owners(p, int64_t(c.m_block) * block_m, block_m);
    const int64_t stream = tile_stream(p, c);
    for (int d = dst.first; d <= dst.last; ++d) publish_flag(p, d, stream, c.m_block);
  }
}

// finish() of the Ulysses epilogues: at exit every tile of the CTA at once,
// else thread 0 publishes what the last tile left pending (`publish_last`).
template <Completion kCompletion, int THREADS, class Scheduler, class PublishLast>
__device__ __forceinline__ void finish_flags(const UlyssesStoreParams& p, const Scheduler& sched, int block_m, int tid,
                                             PublishLast&& publish_last) {
  if constexpr (kCompletion == Completion::at_exit)
    publish_every_tile<THREADS>(p, sched, block_m, tid);
  else if (tid == 0)
    publish_last();
}

}  // namespace ulysses_detail

template <StorePath kPath, Completion kCompletion>
struct UlyssesStoreEpilogue {
  using Params = UlyssesStoreParams;

  template <int D, int SMEM_STRIDE>
  __device__ __forceinline__ static void store_rows(const Params& p, const TileCoord& c, int row0, int S_q,
                                                    const uint16_t* srows, int lane) {
    if constexpr (kPath != StorePath::bulk) {
      const ulysses_detail::RowRun rr = ulysses_detail::row_run(p, c, row0, 16, D);
      for_each_staged_chunk<D, SMEM_STRIDE>(srows, row0, S_q, lane, [&](int row, int col, uint4 v) {
        const int r = row - row0;
        uint16_t* dst = (rr.covers(r) ? rr.base + r * rr.pitch : ulysses_detail::row_address(p, c, row, D)) + col;
        if constexpr (kPath == StorePath::vector16_wt)
          ptx::st_global_wt_v4_b32(dst, v);
        else if constexpr (kPath == StorePath::vector16_cs)
          ptx::st_global_cs_v4_b32(dst, v);
        else
          ptx::st_global_v4_b32(dst, v);
      });
    } else {
      static_assert((D * 2) % 16 == 0 && (SMEM_STRIDE * 2) % 16 == 0,
                    "bulk copies need 16-byte multiples and 16-byte aligned rows");
      // Every lane wrote part of the rows with st.shared (generic proxy): each
      // fences its own writes for the async proxy (the TMA unit), then the
      // warp syncs, then lanes 0..15 send one row each.
      ptx::fence_proxy_async_shared();
      __syncwarp();
      const int row = row0 + lane;
      if (lane < 16 && row < S_q)
        ptx::bulk_store_s2g(ulysses_detail::row_address(p, c, row, D), srows + lane * SMEM_STRIDE, D * 2);
      ptx::bulk_commit_group();
      if constexpr (kCompletion == Completion::at_exit) {
        ptx::bulk_wait_group_read_all();  // the staged rows may be overwritten; the writes complete in finish
      } else {
        ptx::bulk_wait_group_all();  // writes performed: the flag after the barrier may follow
        // ... and ordered for the generic proxy, in which thread 0's release is made.
        ptx::fence_proxy_async_global();
      }
    }
  }

  __device__ __forceinline__ static void store_lse(const Params&, const TileCoord&, int, int, int, float) {}

  // The flags of one finished tile: its stream and m-block, destinations d_first..d_last.
  struct Pending {
    int64_t stream = 0;
    int m_block = 0;
    int d_first = 0, d_last = -1;  // empty
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

  __device__ __forceinline__ static void tile_done(const Params& p, const TileCoord& c, int m0, int block_m,
                                                   int S_q, int tid, Pending& pend) {
    // At exit every flag is worked out again when the CTA has no tiles left.
    if (kCompletion == Completion::at_exit || tid != 0) return;
    pend.stream = ulysses_detail::tile_stream(p, c);
    pend.m_block = c.m_block;
    const RankRange dst = ulysses_detail::tile_owners(p, m0, block_m);
    pend.d_first = dst.first;
    pend.d_last = dst.last;
    if constexpr (kCompletion == Completion::lagged || kCompletion == Completion::at_exit)
      return;  // published by before_store or finish
    if constexpr (kCompletion == Completion::coupled) {
      ptx::fence_sc_sys();
      uint32_t sink = 0;
      for (int d = pend.d_first; d <= pend.d_last; ++d) {
        const int64_t first_row_in_d = int64_t(d) * p.chunk > m0 ? int64_t(d) * p.chunk : int64_t(m0);
        sink ^= ulysses_detail::ld_relaxed_sys_u32(ulysses_detail::row_address(p, c, first_row_in_d, p.head_dim));
      }
      asm volatile("" ::"r"(sink));  // keep the loads
    }
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
    ulysses_detail::finish_flags<kCompletion, THREADS>(p, sched, block_m, tid, [&] { publish(p, pend); });
  }

  // After finish: the grid's last CTA waits for the receivers' flags (ulysses_wait.cuh).
  template <int THREADS, class Bar>
  __device__ __forceinline__ static void receive(const Params& p, int tid, Bar&& bar) {
    ulysses_receive_at_end<THREADS>(p, tid, bar);
  }

 private:
  __device__ __forceinline__ static void publish(const Params& p, Pending& pend) {
    for (int d = pend.d_first; d <= pend.d_last; ++d) ulysses_detail::publish_flag(p, d, pend.stream, pend.m_block);
    pend.d_last = pend.d_first - 1;  // published
  }
};

}  // namespace xstage::attention
