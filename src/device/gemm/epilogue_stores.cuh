#pragma once
// How a GEMM epilogue's bf16 values (epilogue_values.cuh: a functor
// out(ob, v) per consumer warp) leave the SM for local memory or for the
// rows of another rank that a caller's row_ptr names. The kernel
// configuration chooses (OUT_COLS, WARP_TMA in tile_config.cuh):
//   store_staged: through a small warp-private staging area in shared
//     memory; each lane then stores 16 contiguous bytes, whole 128-byte row
//     segments a warp instruction (straight from registers a lane would store
//     4 bytes and an instruction would touch 8 rows: the LSU and L2
//     transactions of that epilogue stood exposed between two tiles'
//     mainloops, docs/perf-log.md). The warp waits for nothing, but its
//     stores issue in the consumer's own time, between two mainloops.
//   stage_tile_rows + store_tile_bulk: the whole tile is written to shared
//     memory, then each row (< row_end) leaves as one TMA bulk copy; the
//     consumers return to the mainloop as soon as the copies are issued, and
//     the copy engine drains the tile while the next one computes.
//   store_warp_tma: as asynchronous, in two small buffers a warp: its 16
//     rows leave a box of 64 columns at a time as TMA tensor stores; only
//     lane 0 issues, and the warp waits only for a buffer to be read out,
//     not for its stores to be accepted (level with store_staged on the
//     128 x 256 tiles, slower on 128 x 128: docs/perf-log.md, MoE 10).
//
// Column ends: an N that is no multiple of the tile width leaves the last
// n-block of each expert partial. The stores then take col_end, the first
// column past the matrix, and leave out what lies beyond it. N (and SwiGLU's
// N / 2) being a multiple of 8, a 16-byte piece (8 columns) is wholly inside
// or wholly outside, so a piece is stored or not, never cut. The staged and
// the warp TMA store decide once per warp and tile whether its columns all
// lie inside (every tile but the last n-block): then they run the code they
// ran before col_end existed, the limit read nowhere (kClip = false); only a
// partial tile runs the variant that compares pieces with the limit (kClip =
// true). The bulk store shortens each row's copy (a min a tile).
#include <cstdint>

#include "device/ptx/bulk_copy.cuh"
#include "device/ptx/tma.cuh"

namespace xstage::gemm {

// Staging rows per warp: 16 rows of 64 bf16 columns, padded to 72 so that
// the accumulator writes (lane (g, t) at row g, column 2t of each 8-column
// block) fall in 32 different banks: 144-byte rows put row g at bank 4g.
inline constexpr int kStageStride = 72;
inline constexpr int kStageWarpElems = 16 * kStageStride;

// The last R (< 8) output blocks, from block B0 on: staged as the full chunks
// are, then piece i (of 16 R, R pieces a row) leaves from lane i % 32.
// kClip: only pieces starting below column `cols` (counted from col0) leave.
template <int B0, int R, bool kClip, class RowPtr, class Out>
__device__ __forceinline__ void store_staged_rest(uint16_t* stage, int col0, int cols, int lane, RowPtr& row_ptr,
                                                  Out& out) {
  if (kClip && B0 * 8 >= cols) return;  // the same in every lane: no piece inside
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int b = 0; b < R; ++b) {
    uint32_t v[2];
    out(B0 + b, v);
    *reinterpret_cast<uint32_t*>(stage + g * kStageStride + b * 8 + 2 * t) = v[0];
    *reinterpret_cast<uint32_t*>(stage + (g + 8) * kStageStride + b * 8 + 2 * t) = v[1];
  }
  __syncwarp();
#pragma unroll
  for (int i = lane; i < 16 * R; i += 32) {
    const int r = i / R, piece = i % R;
    if (kClip && (B0 + piece) * 8 >= cols) continue;
    uint16_t* dst = row_ptr(r);
    if (dst != nullptr)
      *reinterpret_cast<uint4*>(dst + col0 + B0 * 8 + piece * 8) =
          *reinterpret_cast<const uint4*>(stage + r * kStageStride + piece * 8);
  }
  __syncwarp();  // the chunks that follow overwrite the rows just read
}

// Output blocks 0 .. 8 CH - 1 in chunks of 64 columns: each lane stores a
// 16-byte piece of 4 rows a chunk. kClip: only pieces starting below column
// `cols` (counted from col0) leave; the chunks from the first wholly outside
// on are not even staged.
template <int CH, bool kClip, class RowPtr, class Out>
__device__ __forceinline__ void store_staged_chunks(uint16_t* stage, int col0, int cols, int lane, RowPtr& row_ptr,
                                                    Out& out) {
  const int g = lane >> 2, t = lane & 3;
  uint16_t* dst[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) dst[i] = row_ptr(i * 4 + (lane >> 3));
#pragma unroll
  for (int ch = 0; ch < CH; ++ch) {
    if (kClip && ch * 64 >= cols) break;  // the same in every lane
#pragma unroll
    for (int b = 0; b < 8; ++b) {
      uint32_t v[2];
      out(ch * 8 + b, v);
      *reinterpret_cast<uint32_t*>(stage + g * kStageStride + b * 8 + 2 * t) = v[0];
      *reinterpret_cast<uint32_t*>(stage + (g + 8) * kStageStride + b * 8 + 2 * t) = v[1];
    }
    __syncwarp();
    const int piece = lane & 7;
    const bool inside = !kClip || ch * 64 + piece * 8 < cols;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = i * 4 + (lane >> 3);
      if (dst[i] != nullptr && inside)
        *reinterpret_cast<uint4*>(dst[i] + col0 + ch * 64 + piece * 8) =
            *reinterpret_cast<const uint4*>(stage + r * kStageStride + piece * 8);
    }
    __syncwarp();  // the next chunk overwrites the rows just read
  }
}

// out(ob, v): the packed bf16x2 values of output block ob (8 columns) for rows
// g (v[0]) and g + 8 (v[1]) of this lane. OB output blocks: chunks of 8 (64
// columns, a lane a 16-byte piece of 4 rows), then the OB % 8 blocks left
// (a narrow tile's warpgroup half, e.g. 40 columns), whose 16 x (OB % 8)
// pieces the lanes take in turn.
// row_ptr(r): where row r (0 .. 15) of the warp's rows goes, as the address
// of its column 0 (its first output column is col0), or null for a row not
// to store; called once per row a lane sends before the 64-column chunks'
// stores, and once per piece in the narrow rest, between its stores (so it
// must have no side effects).
// kClip: only the columns col0 .. col0 + cols - 1 leave (cols a multiple of 8,
// > 0); without it all 8 OB do and cols is not read.
template <int OB, bool kClip = false, class RowPtr, class Out>
__device__ __forceinline__ void store_staged_rows(uint16_t* stage, int col0, int cols, int lane, RowPtr&& row_ptr,
                                                  Out&& out) {
  if constexpr (OB % 8 != 0) store_staged_rest<OB / 8 * 8, OB % 8, kClip>(stage, col0, cols, lane, row_ptr, out);
  if constexpr (OB >= 8) store_staged_chunks<OB / 8, kClip>(stage, col0, cols, lane, row_ptr, out);
}

// Where output rows go: any type with row(r), the address of absolute row
// r's column 0 (a tile adds its column offset). LocalRows is a matrix in
// this GPU's memory; remote/row_table.cuh's RowTable sends each row to the
// rank and slot its tables name.
struct LocalRows {
  uint16_t* c;
  int64_t pitch;  // elements between rows
  __device__ __forceinline__ uint16_t* row(int r) const { return c + int64_t(r) * pitch; }
};

// Rows row .. row + 15 of `rows`, those < row_end, from column col0: all 8 OB
// columns (a caller whose tiles all lie inside the matrix).
template <int OB, class Rows, class Out>
__device__ __forceinline__ void store_staged(uint16_t* stage, const Rows& rows, int row, int row_end, int col0,
                                             int lane, Out&& out) {
  store_staged_rows<OB>(
      stage, col0, OB * 8, lane,
      [&](int r) { return row + r < row_end ? rows.row(row + r) : static_cast<uint16_t*>(nullptr); }, out);
}

// The same, columns from col_end on left out (a multiple of 8; the warp's
// columns past N in the last n-block). One branch a tile: a warp wholly
// inside stores as store_staged does, one wholly outside stores nothing.
template <int OB, class Rows, class Out>
__device__ __forceinline__ void store_staged_clipped(uint16_t* stage, const Rows& rows, int row, int row_end,
                                                     int col0, int col_end, int lane, Out&& out) {
  auto row_ptr = [&](int r) { return row + r < row_end ? rows.row(row + r) : static_cast<uint16_t*>(nullptr); };
  const int cols = col_end - col0;
  if (cols >= OB * 8)
    store_staged_rows<OB, false>(stage, col0, cols, lane, row_ptr, out);
  else if (cols > 0)
    store_staged_rows<OB, true>(stage, col0, cols, lane, row_ptr, out);
}

// The warp's 16 rows of output blocks 0 .. OB-1 into the staged tile: rows
// row0 .. row0 + 15 and columns col0 .. of `tile` (rows ROW_BYTES apart).
// ROW_BYTES = 16 (mod 128) puts rows g = 0..7 four banks apart: the 32 lanes'
// 4-byte stores hit 32 different banks.
template <int OB, uint32_t ROW_BYTES, class Out>
__device__ __forceinline__ void stage_tile_rows(uint8_t* tile, int row0, int col0, int lane, Out&& out) {
  static_assert(ROW_BYTES % 128 == 16, "rows 4 banks apart");
  const int g = lane >> 2, t = lane & 3;
  uint8_t* r0 = tile + (row0 + g) * ROW_BYTES + (col0 + 2 * t) * 2;
#pragma unroll
  for (int ob = 0; ob < OB; ++ob) {
    uint32_t v[2];
    out(ob, v);
    *reinterpret_cast<uint32_t*>(r0 + ob * 16) = v[0];
    *reinterpret_cast<uint32_t*>(r0 + 8 * ROW_BYTES + ob * 16) = v[1];
  }
}

// Issued by consumer thread ct (0 .. 255) once the whole tile is staged and
// made visible to the async proxy: thread ct < BM sends tile row ct, if it
// belongs to this expert, as one bulk copy to row `first_row + ct` of `rows`,
// starting at column col0: OUT_COLS bf16, or fewer where the row reaches
// col_end (the last n-block of an N that is no multiple of the tile width;
// col0 < col_end, both multiples of 8, so the copy stays a multiple of 16 bytes).
template <int BM, int OUT_COLS, uint32_t ROW_BYTES, class Rows>
__device__ __forceinline__ void store_tile_bulk(const uint8_t* tile, const Rows& rows, int first_row, int row_end,
                                                int col0, int col_end, int ct) {
  if (ct >= BM) return;
  const int row = first_row + ct;
  const int cols = col_end - col0 < OUT_COLS ? col_end - col0 : OUT_COLS;
  if (row < row_end) {
    ptx::bulk_store_s2g(rows.row(row) + col0, tile + ct * ROW_BYTES, uint32_t(cols) * 2);
    ptx::bulk_commit_group();
  }
}

// store_warp_tma's boxes (below). kClip: the warp's columns reach past n_out;
// boxes wholly past it are neither staged nor sent, a box across it is sent
// whole and the TMA unit writes only its columns < n_out (a tensor store
// clips at the map's bounds, and the map of c is n_out columns wide), and
// the per-lane stores of a partial warp compare each piece.
template <int OB, bool kClip, class Out>
__device__ __forceinline__ void store_warp_tma_boxes(uint8_t* boxes, const CUtensorMap* map, uint16_t* c, int n_out,
                                                     int row, int row_end, int col0, int lane, uint32_t& groups,
                                                     Out& out) {
  constexpr int kBoxBytes = 16 * 128;
  const bool whole = row + 16 <= row_end;  // the same in every lane
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int ch = 0; ch < OB / 8; ++ch) {
    if (kClip && col0 + ch * 64 >= n_out) break;  // the same in every lane
    uint8_t* box = boxes + (groups & 1) * kBoxBytes;
    if (lane == 0) {
      if (whole)
        ptx::bulk_wait_group_read<1>();
      else
        ptx::bulk_wait_group_read<0>();
    }
    __syncwarp();
#pragma unroll
    for (int b = 0; b < 8; ++b) {
      uint32_t v[2];
      out(ch * 8 + b, v);
      // Rows g and g + 8 share r % 8 = g: the same piece order.
      *reinterpret_cast<uint32_t*>(box + g * 128 + ((b ^ g) << 4) + 4 * t) = v[0];
      *reinterpret_cast<uint32_t*>(box + (g + 8) * 128 + ((b ^ g) << 4) + 4 * t) = v[1];
    }
    if (whole) {
      ptx::fence_proxy_async_shared();  // each lane's writes, before the TMA unit reads the box
      __syncwarp();
      if (lane == 0) {
        ptx::tma_store_2d(map, box, col0 + ch * 64, row);
        ptx::bulk_commit_group();
      }
      ++groups;
    } else {
      __syncwarp();
      const int piece = lane & 7, col = col0 + ch * 64 + piece * 8;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = i * 4 + (lane >> 3);
        if (row + r < row_end && (!kClip || col < n_out))
          *reinterpret_cast<uint4*>(c + int64_t(row + r) * n_out + col) =
              *reinterpret_cast<const uint4*>(box + r * 128 + ((piece ^ (r & 7)) << 4));
      }
    }
  }
}

// Rows row .. row + 15 of c (n_out columns), those < row_end, from column
// col0, those < n_out: each box of 64 columns is written into one of the
// warp's two 2 KiB buffers (`boxes`, 1024-byte aligned) in the layout of the
// 128-byte TMA swizzle (16-byte piece j of row r at piece j ^ (r % 8): the
// lanes' 4-byte writes of one 8-column block hit 32 different banks), then
// lane 0 sends it with one tensor store of `map` (c as 2-D, n_out x rows,
// boxes of 64 x 16) and the warp goes on. `groups` counts the warp's stores
// over all its tiles: store n uses buffer n % 2, so the newest store still
// pending reads the other buffer, and waiting until at most that one is
// pending frees this one. A warp whose rows cross row_end (an expert's last
// rows, or past the tensor) stores its rows < row_end itself, 16 bytes a lane
// from a box no store reads any more. The caller waits for the stores
// (bulk_wait_group_all) before the kernel ends. One branch a tile between the
// boxes of a warp wholly inside n_out and those of one that reaches past it.
template <int OB, class Out>
__device__ __forceinline__ void store_warp_tma(uint8_t* boxes, const CUtensorMap* map, uint16_t* c, int n_out,
                                               int row, int row_end, int col0, int lane, uint32_t& groups,
                                               Out&& out) {
  static_assert(OB % 8 == 0, "64-column boxes");
  if (row >= row_end) return;
  if (col0 + OB * 8 <= n_out)
    store_warp_tma_boxes<OB, false>(boxes, map, c, n_out, row, row_end, col0, lane, groups, out);
  else
    store_warp_tma_boxes<OB, true>(boxes, map, c, n_out, row, row_end, col0, lane, groups, out);
}

}  // namespace xstage::gemm
