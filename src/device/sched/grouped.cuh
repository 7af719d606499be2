#pragma once
// The grouped-GEMM tile order (MoE experts): tiles over (expert, n_block,
// m_block), experts in order, m_block fastest inside an expert, so that CTAs
// running at the same time share one expert's weight tiles (B[e], the larger
// operand at inference row counts), which then stay in L2. The contract:
// sched/persistent_walk.cuh; the walk is its persistent strided one (tile t
// on CTA t % gridDim.x).
//
// The experts' row counts live on the device (an offsets array, as
// torch._grouped_mm takes them), so neither the host nor a CTA knows the tile
// count in advance. Each CTA keeps a cursor (expert, first tile of that
// expert) in its work item; since its tiles increase, the cursor only moves
// forward and the walk reads every offset once per CTA: no tile table, no
// host synchronisation. The walk ends when the cursor passes the last expert.
//
// Split-K: with `splits` > 1 every tile is `splits` work items (split fastest),
// each a contiguous range of the k-blocks; the kernel sums them (sm90 kernel,
// grouped_gemm_sm90.cuh). Consecutive items of one tile then run at the same
// time on neighbouring CTAs, and few large experts still fill the machine.
//
// Tail split (`tail_splits` > 1, `splits` = 1): the last wave's tiles split
// their k-blocks over the CTAs that would idle (tail_split.hpp). The layout
// needs the launch's tile count, which one warp of each CTA works out from
// the offsets while the first tiles run (count_tiles) and publishes in the
// CTA's TailShared; the walk waits for it only from the second wave on.
#include <cstdint>

#include "device/ptx/mbarrier.cuh"
#include "device/sched/tail_split.hpp"

namespace xstage::sched {

struct GroupedTile {
  int expert;
  int m_block, n_block;
  int row_begin;  // first row of the expert in A and C
  int row_end;    // one past its last row
  int split;      // the tile's k range, 0 .. splits - 1
  int splits;     // k ranges of this tile (1: the whole of K)
  int slot;       // split tiles: where its partials and count live (split_reduce)
};

struct GroupedWork {
  int t;          // item index in the launch's order (the strided walk's)
  int tile;       // the tile item t computes (a part of, when split)
  int expert;     // the cursor: the expert holding the tile (E once past the end)
  int base;       // first tile of that expert
  int row_begin, row_end, m_blocks;
};

// The tail split's layout as one warp of the CTA published it (ready: an
// mbarrier of one arrival, initialised with the CTA's other barriers).
struct TailShared {
  TailSplitLayout layout;
  uint64_t ready;
};

struct GroupedTileScheduler {
  struct Params {
    const int32_t* offs = nullptr;  // [E] cumulative row ends
    int E = 0, rows_total = 0, n_blocks = 0;  // n_blocks: an expert's, ceil(N / BLOCK_N)
    int splits = 1;  // work items per tile (split-K), >= 1
    int tail_splits = 1;  // > 1 (with splits 1): the tail split's cap (tail_split.hpp)
  };
  using SharedStorage = TailShared;
  using Coord = GroupedTile;

  Params p;
  int block_m;
  TailShared* tail;  // the CTA's (tail split only)

  __host__ __device__ GroupedTileScheduler(const Params& params, int bm, TailShared* shared = nullptr)
      : p(params), block_m(bm), tail(shared) {}

  __device__ __forceinline__ bool tail_split() const { return p.tail_splits > 1; }

  // Tail split: by one warp of each CTA, once, after the CTA's barrier inits.
  // The tiles of every expert, offsets clamped as enter_expert clamps them:
  // expert e ends at min(rows_total, max(0, offs[0..e])), so a warp scans 32
  // experts at a time (prefix maximum by shuffles), then publishes the layout.
  __device__ __forceinline__ void count_tiles(int lane) const {
    int carry = 0;   // the previous expert's end
    int tiles = 0;   // m-blocks so far (this lane's share until the sum below)
    for (int e0 = 0; e0 < p.E; e0 += 32) {
      const int e = e0 + lane;
      int end = e < p.E ? __ldg(p.offs + e) : 0;
      end = end > carry ? end : carry;
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const int up = __shfl_up_sync(0xffffffffu, end, d);
        if (lane >= d && up > end) end = up;
      }
      end = end < p.rows_total ? end : p.rows_total;
      int begin = __shfl_up_sync(0xffffffffu, end, 1);
      if (lane == 0) begin = carry;
      if (e < p.E) tiles += (end - begin + block_m - 1) / block_m;
      carry = __shfl_sync(0xffffffffu, end, 31);
    }
#pragma unroll
    for (int d = 16; d > 0; d /= 2) tiles += __shfl_xor_sync(0xffffffffu, tiles, d);
    if (lane == 0) {
      tail->layout = tail_split_layout(tiles * p.n_blocks, int(gridDim.x), p.tail_splits);
      ptx::mbar_arrive(&tail->ready);  // release: the layout before the phase
    }
  }

  // Tiles of the launch at most (every expert's last m-block partial): what
  // the grid (times the splits) and the split-K workspace are sized from on the host.
  __host__ __device__ static int64_t max_tiles(int rows_total, int E, int block_m, int n_blocks) {
    return (int64_t(rows_total) / block_m + E) * n_blocks;
  }
  __host__ static int64_t grid_size(int64_t num_tiles, int sm_count, int ctas_per_sm) {
    const int64_t resident = int64_t(sm_count) * ctas_per_sm;
    return num_tiles < resident ? num_tiles : resident;
  }

  // The walk's state (the cursor) lives in each work item, so the scheduler is
  // its own walk: the grouped GEMM calls first / next / valid on it directly.
  template <class Count = int>
  __device__ __forceinline__ const GroupedTileScheduler& walk() const {
    return *this;
  }

  // Items t < gridDim.x are whole tiles in every mode but split-K's
  // (tail_split_layout splits nothing before a full wave), so the first item
  // needs no tile count.
  __device__ __forceinline__ GroupedWork first() const {
    const int t = int(blockIdx.x);
    GroupedWork w{t, t / p.splits, -1, 0, 0, 0, 0};
    enter_expert(w, 0, 0);
    return settle(w);
  }
  __device__ __forceinline__ GroupedWork next(GroupedWork w) const {
    w.t += int(gridDim.x);
    if (tail_split()) {
      ptx::mbar_wait(&tail->ready, 0);  // at once after the first time
      w.tile = tail_split_item(w.t, layout()).tile;
    } else {
      w.tile = w.t / p.splits;
    }
    return settle(w);
  }
  __device__ __forceinline__ bool valid(const GroupedWork& w) const { return w.expert < p.E; }
  __device__ __forceinline__ bool is_last(const GroupedWork& w) const { return !valid(next(w)); }
  __device__ __forceinline__ void wait_ready(const GroupedWork&) const {}

  __device__ __forceinline__ GroupedTile coord(const GroupedWork& w) const {
    const int local = w.tile - w.base;
    GroupedTile c{w.expert, local % w.m_blocks, local / w.m_blocks, w.row_begin, w.row_end, w.t % p.splits,
                  p.splits, w.tile};
    if (tail_split() && w.t >= int(gridDim.x)) {  // next() has waited for the layout
      const TailSplitItem i = tail_split_item(w.t, layout());
      c.split = i.split, c.splits = i.splits, c.slot = i.slot;
    }
    return c;
  }

 private:
  // The published layout (next() has waited for it), read as warp-uniform
  // values: every thread reads the same words, and redux.sync says so to
  // ptxas. A plain shared-memory load is per-thread to it, and a walk that
  // depends on one (the tile, the whole-tile loop's exit) moves the
  // producer's whole k loop into per-thread registers (4 R2UR a TMA load,
  // a convergence barrier a stage wait).
  __device__ __forceinline__ TailSplitLayout layout() const {
    const unsigned lanes = __activemask();
    return {__reduce_min_sync(lanes, tail->layout.whole), __reduce_min_sync(lanes, tail->layout.splits)};
  }
  // Offsets clamped into [previous end, rows_total]: bad offsets on the
  // device make empty experts, never rows outside the tensors.
  __device__ __forceinline__ void enter_expert(GroupedWork& w, int e, int base) const {
    w.expert = e;
    w.base = base;
    if (e >= p.E) return;
    const int begin = e == 0 ? 0 : w.row_end;
    int end = __ldg(p.offs + e);
    end = end < begin ? begin : end > p.rows_total ? p.rows_total : end;
    w.row_begin = begin;
    w.row_end = end;
    w.m_blocks = (end - begin + block_m - 1) / block_m;
  }
  // Moves the cursor forward to the expert that holds tile w.tile.
  __device__ __forceinline__ GroupedWork settle(GroupedWork w) const {
    while (w.expert < p.E && w.tile >= w.base + w.m_blocks * p.n_blocks)
      enter_expert(w, w.expert + 1, w.base + w.m_blocks * p.n_blocks);
    return w;
  }
};

}  // namespace xstage::sched
