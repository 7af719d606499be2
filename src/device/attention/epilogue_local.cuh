#pragma once
// Output-tile epilogue. The kernel normalises its O accumulators, stages the
// warp's 16 rows as bf16 in shared memory (epilogue/staged_rows.cuh) and
// hands them to the epilogue policy, which decides where the rows go.
// LocalStoreEpilogue writes them to O in [B, S, H, D] with 16-byte stores;
// the remote-store epilogues (remote/epilogue_*.cuh, with the Ulysses
// destination map) implement the same members and send the rows to the rank
// that owns their sequence positions.
#include <cstdint>

#include "device/attention/attention_params.hpp"
#include "device/epilogue/staged_rows.cuh"
#include "device/ptx/store.cuh"
#include "device/sched/attention_tile.hpp"

namespace xstage::attention {

struct LocalStoreEpilogue {
  using Params = LocalStoreParams;

  // The warp's 16 staged rows, query rows row0 .. row0 + 15 of tile c; rows
  // >= S_q are padding and not stored. All 32 lanes call it.
  template <int D, int SMEM_STRIDE>
  __device__ __forceinline__ static void store_rows(const Params& p, const sched::TileCoord& c, int row0, int S_q,
                                                    const uint16_t* srows, int lane) {
    uint16_t* base = static_cast<uint16_t*>(p.o) + int64_t(c.b) * p.o_stride_b + int64_t(c.h) * p.o_stride_h;
    epilogue::for_each_staged_chunk<D, SMEM_STRIDE>(srows, row0, S_q, lane, [&](int row, int col, uint4 v) {
      ptx::st_global_v4_b32(base + int64_t(row) * p.o_stride_s + col, v);
    });
  }

  // Log-sum-exp of one query row (natural log), [B, H, S_q] contiguous.
  __device__ __forceinline__ static void store_lse(const Params& p, const sched::TileCoord& c, int row, int S_q, int H,
                                                   float lse) {
    if (p.lse != nullptr && row < S_q) p.lse[(int64_t(c.b) * H + c.h) * S_q + row] = lse;
  }

  // Completion hooks (the remote-store epilogues publish flags there); a
  // local store has nothing to publish. Every thread calls them: tile_done
  // after a barrier that follows the tile's store_rows, before_store (only
  // when kBeforeStore) after the next tile's mainloop, finish at CTA exit.
  struct Pending {};
  static constexpr bool kBeforeStore = false;
  // Rows staged in the Q rows and stored at once; nothing to send while the
  // next tile computes (remote/epilogue_paced.cuh does).
  static constexpr bool kOwnStaging = false;
  template <int D, int SMEM_STRIDE, int THREADS>
  __device__ __forceinline__ static void mainloop_step(const Params&, Pending&, const uint16_t*, int /*j*/,
                                                       int /*n*/, int /*tid*/) {}
  template <int D, int SMEM_STRIDE, int THREADS>
  __device__ __forceinline__ static void flush(const Params&, Pending&, const uint16_t*, int /*tid*/) {}
  __device__ __forceinline__ static void before_store(const Params&, Pending&, int /*tid*/) {}
  __device__ __forceinline__ static void tile_done(const Params&, const sched::TileCoord&, int /*m0*/, int /*block_m*/,
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
