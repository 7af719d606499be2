#pragma once
// The persistent strided walk that the static schedulers share. The
// scheduler contract (first / next / valid / coord, static and dynamic
// walks) is in sched/README.md; a static walk adds num_tiles(), is_last(w),
// nth(k) and grid_size(). Index is the walk's integer type: 64-bit where
// tile counts are unbounded, 32-bit where the host has checked the count
// fits and the divisions in coord() sit on a critical path (a 64-bit
// division is a long software routine; docs/perf-log.md, f7, f8).
#include <cstdint>

namespace xstage::sched {

template <class Index>
struct Work {
  Index t;  // tile index in the launch's order
};

// One CTA's walk over a static schedule: tile t runs on CTA t % gridDim.x, in
// increasing t, so each CTA walks every gridDim-th tile (the order one CTA
// per tile would run in) on a grid of as many CTAs as fit at once. The walk
// is a value a kernel takes where it needs it, apart from the scheduler's
// parameters; a dynamic schedule keeps its per-CTA state (a cursor, the item
// fetched last) in its walk the same way. Count is the type the tile count
// is worked out in: a 32-bit walk taken at a kernel's end computes its count
// anew in 32 bits, where a 64-bit one would be the same expression as the
// kernel's first walk, kept live in two registers through the whole mainloop
// (measured: vector16 at S = 4096, 1.3 points; perf-log r1).
template <class Count>
struct StridedWalk {
  Count tiles;

  template <class Index = Count>
  __device__ __forceinline__ Work<Index> first() const {
    return {Index(blockIdx.x)};
  }
  template <class Index = Count>
  __device__ __forceinline__ Work<Index> nth(Index k) const {
    return {Index(blockIdx.x) + k * Index(gridDim.x)};
  }
  template <class Index>
  __device__ __forceinline__ Work<Index> next(Work<Index> w, Index k = 1) const {
    return {w.t + k * Index(gridDim.x)};
  }
  template <class Index>
  __device__ __forceinline__ bool valid(Work<Index> w) const {
    return w.t < Index(tiles);
  }
  template <class Index>
  __device__ __forceinline__ bool is_last(Work<Index> w) const {
    return w.t + Index(gridDim.x) >= Index(tiles);
  }
};

// What the static schedulers share; Derived (CRTP) supplies tile_count<Count>() and coord().
template <class Derived>
struct PersistentWalk {
  template <class Count = int64_t>
  __device__ __forceinline__ StridedWalk<Count> walk() const {
    return {static_cast<const Derived&>(*this).template tile_count<Count>()};
  }
  template <class Index>
  __device__ __forceinline__ void wait_ready(Work<Index>) const {}

  __host__ static int64_t grid_size(int64_t num_tiles, int sm_count, int ctas_per_sm) {
    const int64_t resident = int64_t(sm_count) * ctas_per_sm;
    return num_tiles < resident ? num_tiles : resident;
  }
};

}  // namespace xstage::sched
