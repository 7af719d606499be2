#pragma once
// Tile shape and shared-memory plan of the sm_90a GEMM kernels (the grouped
// GEMM, the fused MoE layer): BLOCK_M x BLOCK_N output tiles, k-blocks of
// one 128-byte swizzle row of the element type, two consumer warpgroups laid
// out WG_M x WG_N over the tile, one producer warpgroup, and how the
// epilogue leaves shared memory (OUT_COLS, below).
#include <cstddef>
#include <cstdint>

#include "device/gemm/element.cuh"

namespace xstage::gemm {

// OUT_COLS = 0: each consumer warp stores its rows through a warp-private
// staging area with 16-byte stores (epilogue_stores.cuh, store_staged).
// OUT_COLS > 0: the whole output tile (BLOCK_M rows of OUT_COLS bf16: BLOCK_N,
// or BLOCK_N / 2 after the SwiGLU) is staged, and every row leaves as one TMA
// bulk copy (store_tile_bulk): the consumers go back to the mainloop while
// the copy engine drains the tile. It costs a tile's worth of shared memory,
// one pipeline stage of the largest tile.
// WARP_TMA: each consumer warp stages its 16 rows a box of 64 columns at a
// time, swizzled, in one of two 2 KiB buffers, and one lane sends the box as
// a TMA tensor store (store_warp_tma): the warp moves on while the TMA unit
// writes, as with the bulk tile, but in 32 KiB, which the 128-row tiles have
// beside their stages (no stage lost).
// MAX_STAGES: the ring's depth at most. A small tile streams its operands
// (few FLOPs a loaded byte), so it wants more bytes in flight than a wide
// tile's 4-6 stages hold; the wide tiles fit fewer than 8 anyway.
// PINGPONG: each consumer warpgroup owns whole tiles, every other tile of
// the CTA's walk, BLOCK_M / 64 row halves of BLOCK_N columns; their
// mainloops take turns on the tensor cores and one's epilogue runs while the
// other computes (short K, where the epilogue is a large part of a tile:
// docs/perf-log.md, MoE M3). Otherwise both warpgroups share every tile,
// WG_M x WG_N of it (WGN: 1 puts them one above the other, 2 side by side).
// The output is bf16 whatever the operands are (the staging sizes below).
template <class Elem_, int BM, int BN, int WGN, int OUT_COLS_ = 0, bool WARP_TMA_ = false, int MAX_STAGES = 8,
          bool PINGPONG_ = false>
struct TileConfig {
  using Elem = Elem_;
  static constexpr int BLOCK_M = BM, BLOCK_N = BN, BLOCK_K = Elem::kBlockK;
  static constexpr int OUT_COLS = OUT_COLS_;
  static constexpr bool BULK_OUT = OUT_COLS > 0;
  static constexpr bool WARP_TMA = WARP_TMA_;
  static constexpr bool PINGPONG = PINGPONG_;
  static_assert(!(BULK_OUT && WARP_TMA), "one output store");
  static_assert(!(PINGPONG && (BULK_OUT || WARP_TMA)), "ping-pong tiles leave by the staged store only");
  static_assert(OUT_COLS == 0 || OUT_COLS == BN || 2 * OUT_COLS == BN, "a plain or a SwiGLU tile's columns");
  static constexpr int WG_N = PINGPONG ? 1 : WGN, WG_M = PINGPONG ? 1 : 2 / WGN;
  static_assert(PINGPONG ? BM % 64 == 0 && BM <= 128 : WG_M * 64 == BM,
                "each consumer warpgroup owns 64 rows of the tile (ping-pong: 64 or 128 of its own tile)");
  static constexpr int WG_HALVES = PINGPONG ? BM / 64 : 1;  // 64-row wgmma blocks a warpgroup computes
  static constexpr int WG_TILE_N = BN / WG_N;  // the wgmma N of one warpgroup
  // wgmma N (a multiple of 8), the TMA box (<= 256 rows), and each warpgroup's
  // B rows starting on an 8-row swizzle atom. (SwiGLU's gate/up pairs of
  // 8-column blocks are the epilogue's requirement: gemm::SwigluEpilogue.)
  static_assert(WG_TILE_N % 8 == 0 && WG_TILE_N <= 256 && BN <= 256, "wgmma N and the TMA box (<= 256 rows)");
  static constexpr int CONSUMER_WGS = 2;
  static constexpr int THREADS = 128 * (1 + CONSUMER_WGS);
  static constexpr int CONSUMER_WARPS = 4 * CONSUMER_WGS;
  // The warps that read each stage and free it: one warpgroup's in ping-pong.
  static constexpr int STAGE_READERS = PINGPONG ? 4 : CONSUMER_WARPS;
  // Registers: the producer keeps few, the consumers hold WG_HALVES x 64 x
  // WG_TILE_N fp32 accumulators (up to 128 a thread); 40 * 128 + 232 * 256 <= 64 Ki.
  static_assert(WG_HALVES * WG_TILE_N <= 256, "at most 128 accumulators a consumer thread");
  static constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;

  static constexpr uint32_t A_BYTES = BM * 128, B_BYTES = BN * 128;  // a 128-byte k-block row each
  static constexpr uint32_t STAGE_BYTES = A_BYTES + B_BYTES;
  // As many stages as fit beside the barriers in the 227 KiB an SM gives one
  // CTA: the loads run ahead across tile boundaries, so the next tile's
  // operands arrive while this one's epilogue stores.
  static constexpr size_t SMEM_LIMIT = 227 * 1024;
  // The epilogue's staging: 16 x 72 bf16 a consumer warp (warp-private rows),
  // or the whole tile with rows OUT_ROW_BYTES apart: 16 bytes of padding put
  // the 8 rows a warp's accumulator store touches in 8 different bank groups.
  static constexpr uint32_t OUT_ROW_BYTES = OUT_COLS * 2 + 16;
  static constexpr size_t TMA_BOX_BYTES = 16 * 128;  // 16 rows of 64 bf16
  static constexpr size_t STAGING_BYTES = BULK_OUT   ? size_t(BM) * OUT_ROW_BYTES
                                          : WARP_TMA ? size_t(CONSUMER_WARPS) * 2 * TMA_BOX_BYTES
                                                     : size_t(CONSUMER_WARPS) * 16 * 72 * 2;
  static constexpr int STAGES_FIT = int((SMEM_LIMIT - 1024 - 1024 - STAGING_BYTES) / STAGE_BYTES);
  static constexpr int STAGES = STAGES_FIT > MAX_STAGES ? MAX_STAGES : STAGES_FIT;
  static_assert(STAGES >= 2, "at least double buffering");
  static constexpr size_t OFF_STAGING = size_t(STAGES) * STAGE_BYTES;
  static_assert(OFF_STAGING % 1024 == 0, "the swizzled boxes start on a 1024-byte swizzle atom");
  static constexpr size_t OFF_BAR = OFF_STAGING + STAGING_BYTES;  // the stage ring's barriers
  // Split-K: the tile's arrival count as the consumers' thread 0 read it.
  static constexpr size_t OFF_SPLIT_FLAG = OFF_BAR + 2 * STAGES * 8;
  // The tile scheduler's shared storage (the grouped GEMM's tail-split
  // layout and its barrier: 16 bytes, 8-byte aligned).
  static constexpr size_t OFF_SCHED = OFF_SPLIT_FLAG + 16;
  static_assert(OFF_SCHED % 8 == 0, "the scheduler's barrier is 8-byte aligned");
  // Split-K's last CTA of a tile reads the partials through the idle stage
  // ring: up to 4 barriers of those copies.
  static constexpr size_t OFF_REDUCE_BARS = OFF_SCHED + 16;
  // + 1024: the dynamic shared window is aligned up to the 1024-byte swizzle atom in the kernel.
  static constexpr size_t SMEM_BYTES = OFF_REDUCE_BARS + 32 + 1024;
};

}  // namespace xstage::gemm
