#pragma once
// Plain parameter block of the grouped (MoE expert) GEMM, shared by the .cu
// launch files and host C++ (no CUDA types, no host libraries).
//
// C[rows of expert e, :] = A[rows of expert e, :] x B[e]^T, all bf16, fp32
// accumulation. A is [rows_total, K] row-major (K contiguous); B is
// [E, N, K] (K contiguous: each expert's weight stored as nn.Linear stores
// it); the rows of expert e are offs[e-1] .. offs[e] of A (offs[-1] = 0), the
// cumulative ends torch._grouped_mm takes. C is [rows_total, n_out] with
// n_out = N (plain store) or N / 2 (SwiGLU).
// Host validation (src/runtime/moe/) guarantees: pointers 16-byte aligned,
// K a positive multiple of 8, N a positive multiple of 16 (any multiple: the
// last n-block of each expert may be partial), rows_total >= 0, E >= 1. The
// kernel clamps every expert's row range into [0, rows_total] (offsets live
// on the device, where the host cannot check them without a
// synchronisation): decreasing or too-large offsets give empty experts, never
// out-of-bounds stores.
#include <cstdint>

namespace xstage::moe {

struct GroupedGemmParams {
  const void* a = nullptr;            // bf16 [rows_total, K]
  const void* b = nullptr;            // bf16 [E, N, K]
  void* c = nullptr;                  // bf16 [rows_total, n_out]
  const int32_t* offs = nullptr;      // [E] cumulative row ends
  const float* row_weight = nullptr;  // [rows_total] routing weight of each row, or nullptr (SwiGLU only)
  int rows_total = 0, K = 0, N = 0, E = 0;
  // Split-K (splits > 1): each tile's k-blocks in `splits` ranges on different
  // CTAs. Each range's fp32 partial goes to split_ws[(tile * splits + split) *
  // BLOCK_M * BLOCK_N]; the last CTA of a tile to count itself in
  // split_count[tile] sums the partials in split order (the same sum whoever
  // is last), runs the epilogue and sets the count back to 0 for the next
  // launch. Both arrays hold max_tiles (sched/grouped.cuh, n-blocks rounded
  // up) tiles; the counts start at 0. One split-K launch at a time may use them.
  int splits = 1;                     // 1 .. k-blocks (ceil(K / 64))
  // Tail split (tail_splits > 1, splits 1): only the last wave's tiles split,
  // each at most tail_splits ways (sched/tail_split.hpp); the k-th split tile
  // of the tail keeps its partials at split_ws[(k * its splits + split) *
  // BLOCK_M * BLOCK_N] and its count at split_count[k]: one grid's partials
  // (a slot a CTA) and counts at most, as the launch's grid is sized.
  int tail_splits = 1;                // 1 .. k-blocks
  float* split_ws = nullptr;
  int32_t* split_count = nullptr;
};

// The tile shapes compiled (BLOCK_M x BLOCK_N; two consumer warpgroups each).
enum TileId : int {
  kTileM128N256 = 0,  // warpgroups stacked along M: 64 x 256 each
  kTileM64N256 = 1,   // warpgroups side by side along N: 64 x 128 each (small experts)
  kTileM128N128 = 2,  // warpgroups stacked along M: 64 x 128 each (more tiles for few, large experts)
  kTileM64N80 = 3,    // warpgroups side by side along N: 64 x 40 each (few long experts, narrow N); L2, staged
  kTileM128N128Pingpong = 4,  // each warpgroup 128 x 128 tiles of its own, turn about (short K); staged, no split
  kTileCount = 5,
};

// How the epilogue's output leaves shared memory (gemm/tile_config.cuh, OUT_COLS).
enum OutStoreId : int {
  kOutWarpStaged = 0,  // 16-byte stores from warp-private staging rows
  kOutTileBulk = 1,    // the whole tile staged, one TMA bulk copy a row
  kOutWarpTma = 2,     // warp-private swizzled boxes, double-buffered, one TMA tensor store a box
};

}  // namespace xstage::moe
