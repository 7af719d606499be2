#pragma once
// The senders of the remote-store layer: staged output rows (shared memory)
// to the ranks the destination map names (remote/destination.cuh), by
//   StorePath::vector16  each lane stores 16-byte chunks from registers
//                        (st.global.v4), consecutive lanes on consecutive
//                        chunks of a row; _wt and _cs: with the
//                        write-through or the streaming cache operator;
//   StorePath::bulk      one TMA bulk copy (cp.async.bulk shared -> global)
//                        a row and lane;
// and the paced paths' plan: a tile's rows in slices over the next tile's
// steps, so that each SM adds its bytes to the X-Stage at a steady rate.
#include <cstdint>

#include "device/epilogue/staged_rows.cuh"
#include "device/ptx/bulk_copy.cuh"
#include "device/ptx/store.cuh"
#include "device/remote/destination.cuh"
#include "xstage/comm/remote_store.hpp"

namespace xstage::remote {

// A warp's 16 staged rows (rows >= S_q are padding) of tile c, first row
// row0. Bulk copies: each lane fences its own st.shared writes for the async
// proxy (the TMA unit), the warp syncs, lanes 0..15 send one row each. A
// release does not cover the async proxy, so before a flag that follows the
// tile (every completion but at-exit) each lane waits until its copies have
// written the rows and orders them for the generic proxy; at exit that wait
// comes once, before the flags (measured, perf-log f13: a few tenths of a
// point at S = 4096 with device buffers, nothing on PCIe).
template <class Dest, StorePath kPath, Completion kCompletion, int D, int SMEM_STRIDE>
__device__ __forceinline__ void send_warp_rows(const typename Dest::Params& p, const typename Dest::Tile& c, int row0,
                                               int S_q, const uint16_t* srows, int lane) {
  if constexpr (kPath != StorePath::bulk) {
    const auto rows = Dest::rows(p, c);
    const RowRun rr = rows.run(row0, 16);
    epilogue::for_each_staged_chunk<D, SMEM_STRIDE>(srows, row0, S_q, lane, [&](int row, int col, uint4 v) {
      const int r = row - row0;
      uint16_t* dst = (rr.covers(r) ? rr.base + r * rr.pitch : rows.row(row)) + col;
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
    ptx::fence_proxy_async_shared();
    __syncwarp();
    const int row = row0 + lane;
    if (lane < 16 && row < S_q) ptx::bulk_store_s2g(Dest::rows(p, c).row(row), srows + lane * SMEM_STRIDE, D * 2);
    ptx::bulk_commit_group();
    if constexpr (kCompletion == Completion::at_exit) {
      ptx::bulk_wait_group_read_all();  // the staged rows may be overwritten; the writes complete before the flags
    } else {
      ptx::bulk_wait_group_all();       // writes performed: the flag after the barrier may follow
      ptx::fence_proxy_async_global();  // ... ordered for the generic proxy, in which the release is made
    }
  }
}

// Staged rows [lo, hi) of tile c (first row m0) in 16-byte chunks, thread
// tid of THREADS, consecutive threads on consecutive chunks of a row.
template <class Dest, int D, int SMEM_STRIDE, int THREADS>
__device__ __forceinline__ void send_staged_chunks(const typename Dest::Params& p, const typename Dest::Tile& c,
                                                   int m0, const RowRun& dst, const uint16_t* so, int lo, int hi,
                                                   int tid) {
  constexpr int CHUNKS_PER_ROW = D / 8;
  const int chunks = (hi - lo) * CHUNKS_PER_ROW;
  for (int k = tid; k < chunks; k += THREADS) {
    const int r = lo + k / CHUNKS_PER_ROW, col = (k % CHUNKS_PER_ROW) * 8;
    const uint4 v = *reinterpret_cast<const uint4*>(so + r * SMEM_STRIDE + col);
    ptx::st_global_v4_b32(row_in_run<Dest>(p, c, dst, m0, r) + col, v);
  }
}

// Staged rows [lo, hi) of tile c, one bulk copy a row, lane after lane (a
// row is contiguous in its destination).
template <class Dest, int D, int SMEM_STRIDE>
__device__ __forceinline__ void send_staged_rows_bulk(const typename Dest::Params& p, const typename Dest::Tile& c,
                                                      int m0, const RowRun& dst, const uint16_t* so, int lo, int hi,
                                                      int lane) {
  static_assert((D * 2) % 16 == 0 && (SMEM_STRIDE * 2) % 16 == 0,
                "bulk copies need 16-byte multiples and 16-byte aligned rows");
  for (int r = lo + lane; r < hi; r += 32)
    ptx::bulk_store_s2g(row_in_run<Dest>(p, c, dst, m0, r), so + r * SMEM_STRIDE, D * 2);
  ptx::bulk_commit_group();
}

// The paced paths' plan for a tile's `rows` rows over the next tile's n
// steps: m = min(n, ceil(rows / min_rows)) slices of ceil(rows / m) rows, n /
// m steps apart, the last at step m (n / m) - 1 <= n - 1. Slices of at least
// min_rows rows, because bookkeeping at every step (rows due at each) cost
// the wgmma kernel ~40 instructions a warp a step, 4-5% of it (perf-log f8).
struct PacedPlan {
  int interval, slice;
};
__device__ __forceinline__ PacedPlan paced_plan(int rows, int min_rows, int n) {
  const int most = (rows + min_rows - 1) / min_rows;
  const int m = most < n ? most : n;
  return {n / m, (rows + m - 1) / m};
}

}  // namespace xstage::remote
