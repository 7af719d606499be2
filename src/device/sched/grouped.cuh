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
#include <cstdint>

namespace xstage::sched {

struct GroupedTile {
  int expert;
  int m_block, n_block;
  int row_begin;  // first row of the expert in A and C
  int row_end;    // one past its last row
  int split;      // the tile's k range, 0 .. splits - 1
  int tile;       // the tile's index in the launch (unique, < tiles of the launch)
};

struct GroupedWork {
  int t;          // tile index in the launch's order
  int expert;     // the cursor: the expert holding tile t (E once past the end)
  int base;       // first tile of that expert
  int row_begin, row_end, m_blocks;
};

struct GroupedTileScheduler {
  struct Params {
    const int32_t* offs = nullptr;  // [E] cumulative row ends
    int E = 0, rows_total = 0, n_blocks = 0;  // n_blocks: an expert's, ceil(N / BLOCK_N)
    int splits = 1;  // work items per tile (split-K), >= 1
  };
  struct SharedStorage {};
  using Coord = GroupedTile;

  Params p;
  int block_m;

  __host__ __device__ GroupedTileScheduler(const Params& params, int bm) : p(params), block_m(bm) {}

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

  __device__ __forceinline__ GroupedWork first() const {
    GroupedWork w{int(blockIdx.x), -1, 0, 0, 0, 0};
    enter_expert(w, 0, 0);
    return settle(w);
  }
  __device__ __forceinline__ GroupedWork next(GroupedWork w) const {
    w.t += int(gridDim.x);
    return settle(w);
  }
  __device__ __forceinline__ bool valid(const GroupedWork& w) const { return w.expert < p.E; }
  __device__ __forceinline__ bool is_last(const GroupedWork& w) const { return !valid(next(w)); }
  __device__ __forceinline__ void wait_ready(const GroupedWork&) const {}

  // Every expert's first item is a multiple of `splits`: t / splits numbers the tiles.
  __device__ __forceinline__ GroupedTile coord(const GroupedWork& w) const {
    const int local = (w.t - w.base) / p.splits;
    return {w.expert, local % w.m_blocks, local / w.m_blocks, w.row_begin, w.row_end, w.t % p.splits,
            w.t / p.splits};
  }

 private:
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
  // Moves the cursor forward to the expert that holds tile w.t.
  __device__ __forceinline__ GroupedWork settle(GroupedWork w) const {
    while (w.expert < p.E && w.t >= w.base + w.m_blocks * p.n_blocks * p.splits)
      enter_expert(w, w.expert + 1, w.base + w.m_blocks * p.n_blocks * p.splits);
    return w;
  }
};

}  // namespace xstage::sched
