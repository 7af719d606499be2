#pragma once
// Output-tile epilogue. The kernel normalises its O accumulators, stages the
// warp's 16 rows as bf16 in shared memory (stage_o_rows) and hands them to
// the epilogue policy, which decides where the rows go. LocalStoreEpilogue
// writes them to O in [B, S, H, D] with 16-byte stores; the fused Ulysses
// all-to-all epilogue (epilogue_ulysses.cuh) implements the same members and
// sends the rows to the rank that owns their sequence positions.
#include <cstdint>

#include "device/attention/attention_params.hpp"
#include "device/attention/tile_scheduler.cuh"
#include "device/ptx/math.cuh"
#include "device/ptx/store.cuh"

namespace xstage::attention {

// o: this warp's normalised fp32 accumulators (C layout, D/8 blocks of 8
// columns). Writes rows g and g + 8 of the warp into srows (SMEM_STRIDE
// elements a row). The caller syncs the warp before reading them back.
template <int D, int SMEM_STRIDE>
__device__ __forceinline__ void stage_o_rows(uint16_t* srows, const float (&o)[D / 8][4], int lane) {
  const int g = lane >> 2, c0 = 2 * (lane & 3);
#pragma unroll
  for (int db = 0; db < D / 8; ++db) {
    *reinterpret_cast<uint32_t*>(srows + g * SMEM_STRIDE + db * 8 + c0) = ptx::pack_bf16x2(o[db][0], o[db][1]);
    *reinterpret_cast<uint32_t*>(srows + (g + 8) * SMEM_STRIDE + db * 8 + c0) =
        ptx::pack_bf16x2(o[db][2], o[db][3]);
  }
}

// Hands every 16-byte chunk of the warp's 16 staged rows (rows < S_q only)
// to fn(row, column, chunk), chunks spread over the 32 lanes so that
// consecutive lanes touch consecutive 16 bytes of a row (coalesced).
template <int D, int SMEM_STRIDE, class Fn>
__device__ __forceinline__ void for_each_staged_chunk(const uint16_t* srows, int row0, int S_q, int lane, Fn&& fn) {
  constexpr int CHUNKS_PER_ROW = D / 8;  // 16-byte chunks
  constexpr int CHUNKS = 16 * CHUNKS_PER_ROW;
  static_assert(CHUNKS % 32 == 0, "store_rows: the warp's chunks must split evenly over 32 lanes");
#pragma unroll
  for (int i = 0; i < CHUNKS / 32; ++i) {
    const int chunk = lane + 32 * i;
    const int r = chunk / CHUNKS_PER_ROW, col = (chunk % CHUNKS_PER_ROW) * 8;
    const int row = row0 + r;
    if (row < S_q) fn(row, col, *reinterpret_cast<const uint4*>(srows + r * SMEM_STRIDE + col));
  }
}

struct LocalStoreEpilogue {
  using Params = LocalStoreParams;

  // The warp's 16 staged rows, query rows row0 .. row0 + 15 of tile c; rows
  // >= S_q are padding and not stored. All 32 lanes call it.
  template <int D, int SMEM_STRIDE>
  __device__ __forceinline__ static void store_rows(const Params& p, const TileCoord& c, int row0, int S_q,
                                                    const uint16_t* srows, int lane) {
    uint16_t* base = static_cast<uint16_t*>(p.o) + int64_t(c.b) * p.o_stride_b + int64_t(c.h) * p.o_stride_h;
    for_each_staged_chunk<D, SMEM_STRIDE>(srows, row0, S_q, lane, [&](int row, int col, uint4 v) {
      ptx::st_global_v4_b32(base + int64_t(row) * p.o_stride_s + col, v);
    });
  }

  // Log-sum-exp of one query row (natural log), [B, H, S_q] contiguous.
  __device__ __forceinline__ static void store_lse(const Params& p, const TileCoord& c, int row, int S_q, int H,
                                                   float lse) {
    if (p.lse != nullptr && row < S_q) p.lse[(int64_t(c.b) * H + c.h) * S_q + row] = lse;
  }

  // Completion hooks (epilogue_ulysses.cuh uses them to publish flags); a
  // local store has nothing to publish. Every thread calls them: tile_done
  // after a barrier that follows the tile's store_rows, before_store (only
  // when kBeforeStore) after the next tile's mainloop, finish at CTA exit.
  struct Pending {};
  static constexpr bool kBeforeStore = false;
  // Rows staged in the Q rows and stored at once; nothing to send while the
  // next tile computes (epilogue_ulysses_paced.cuh does).
  static constexpr bool kOwnStaging = false;
  template <int D, int SMEM_STRIDE, int THREADS>
  __device__ __forceinline__ static void mainloop_step(const Params&, Pending&, const uint16_t*, int /*j*/,
                                                       int /*n*/, int /*tid*/) {}
  template <int D, int SMEM_STRIDE, int THREADS>
  __device__ __forceinline__ static void flush(const Params&, Pending&, const uint16_t*, int /*tid*/) {}
  __device__ __forceinline__ static void before_store(const Params&, Pending&, int /*tid*/) {}
  __device__ __forceinline__ static void tile_done(const Params&, const TileCoord&, int /*m0*/, int /*block_m*/,
                                                   int /*S_q*/, int /*tid*/, Pending&) {}
  // finish: `bar` synchronises the epilogue threads, for a policy that must
  // order every thread's work before it publishes.
  template <int THREADS, class Scheduler, class Bar>
  __device__ __forceinline__ static void finish(const Params&, Pending&, const Scheduler&, int /*block_m*/,
                                                int /*S_q*/, int /*tid*/, Bar&&) {}
  template <int THREADS, class Bar>
  __device__ __forceinline__ static void receive(const Params&, int /*tid*/, Bar&&) {}
};

}  // namespace xstage::attention
