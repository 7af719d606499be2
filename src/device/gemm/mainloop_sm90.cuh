#pragma once
// The sm_90a GEMM mainloop, written once: one producer thread loads the A
// and B k-blocks of a tile by TMA (128-byte swizzled) into the stage ring,
// and two consumer warpgroups run wgmma on them, both operands K-major in
// shared memory, one k-block group in flight while the next is waited for.
// A kernel is this mainloop, a tile scheduler that says which tile and which
// k range come next (sched/), and an epilogue policy that says where the
// accumulators go (epilogue_values.cuh, epilogue_stores.cuh, remote/).
//
// Both sides keep their own count `it` of ring uses across all their tiles,
// so the loads run ahead across tile boundaries: the next tile's operands
// land while this tile's epilogue stores.
//
// k ranges: the caller passes [kb0, kb1) with kb1 > kb0. A kernel that never
// splits K should pass 0 and a count computed from its parameters alone: the
// compiler then keeps the loop state in uniform registers (a range read from
// memory costs 2 moves a wgmma descriptor and a divergence guard, up to 17%
// on a short-K GEMM: docs/perf-log.md, MoE 3b).
#include <cstdint>

#include <cuda.h>

#include "device/gemm/block_scales.cuh"
#include "device/gemm/tile_config.cuh"
#include "device/pipeline/stage_ring.cuh"
#include "device/ptx/tma.cuh"
#include "device/ptx/wgmma.cuh"

namespace xstage::gemm {

// mma_halves' default hand-over: none.
struct NoIssued {
  __device__ __forceinline__ void operator()() const {}
};

template <class Cfg>
struct Sm90Mainloop {
  using Elem = typename Cfg::Elem;
  using Ring = pipeline::StageRing<Cfg::STAGES>;
  // One wgmma's k step inside the 128-byte swizzle row: 32 bytes for bf16 (and FP8).
  static constexpr uint32_t kStepBytes = Elem::kMmaK * Elem::kBytes;

  uint8_t* smem;  // stage s: A at smem + s * STAGE_BYTES, B after it (1024-byte aligned)
  Ring ring;

  __device__ __forceinline__ Sm90Mainloop(uint8_t* smem_, uint64_t* bars) : smem(smem_), ring(bars) {}

  // By one thread, with the kernel's other barrier inits.
  __device__ __forceinline__ void init() const { ring.init(Cfg::STAGE_READERS); }

  // Producer thread: the k-blocks [kb0, kb1) of the tile whose A rows start
  // at a_row and B rows at b_row (rows of the maps' second dimension).
  __device__ __forceinline__ void load(uint32_t& it, const CUtensorMap* a, const CUtensorMap* b, int a_row, int b_row,
                                       int kb0, int kb1) const {
    for (int kb = kb0; kb < kb1; ++kb, ++it) {
      const uint32_t s = ring.acquire(it);
      ring.expect_bytes(s, Cfg::STAGE_BYTES);
      uint8_t* stage = smem + s * Cfg::STAGE_BYTES;
      ptx::tma_load_2d(stage, a, ring.full + s, kb * Cfg::BLOCK_K, a_row);
      ptx::tma_load_2d(stage + Cfg::A_BYTES, b, ring.full + s, kb * Cfg::BLOCK_K, b_row);
    }
  }

  // The consumer warpgroup's operand descriptors in stage 0: its 64 rows of
  // A (wg_m) and its WG_TILE_N rows of B (wg_n). K-major, 128-byte swizzle:
  // 8-row atoms 1024 bytes apart (ptx/wgmma.cuh).
  __device__ __forceinline__ uint64_t a_desc(int wg_m) const {
    return ptx::make_smem_desc_sw128(ptx::smem_addr(smem) + wg_m * 64 * 128, 16, 1024);
  }
  __device__ __forceinline__ uint64_t b_desc(int wg_n) const {
    return ptx::make_smem_desc_sw128(ptx::smem_addr(smem) + Cfg::A_BYTES + wg_n * Cfg::WG_TILE_N * 128, 16, 1024);
  }

  // Consumer warpgroup: acc = the tile's product over k-blocks [kb0, kb1).
  // Each slot goes back to the producer as soon as the wgmma group reading it
  // is done (at most one group pending), the last one once all are done.
  // With a per-block promotion (block_scales.cuh) each k-block's products go
  // into a temporary that the promotion folds into acc: that k-block's group
  // must be done first, so none stays pending across k-blocks.
  template <int WN, class Promote = NoPromotion>
  __device__ __forceinline__ void mma(uint32_t& it, float (&acc)[WN / 8][4], uint64_t a_desc0, uint64_t b_desc0,
                                      int kb0, int kb1, int lane, const Promote& promote = Promote{}) const {
    if constexpr (Promote::kPerBlock) {
      mma_promoted<WN>(it, acc, a_desc0, b_desc0, kb0, kb1, lane, promote);
    } else {
      mma_halves<WN, 1>(it, reinterpret_cast<float (&)[1][WN / 8][4]>(acc), a_desc0, b_desc0, kb0, kb1, lane);
    }
  }

  // The same over H row blocks of 64 (a ping-pong warpgroup's own 128-row
  // tile: acc[h] = A rows 64 h .. 64 h + 63 of the stage times B), each
  // k-step's wgmmas of all blocks in one group. issued() runs once the last
  // k-block's wgmmas are issued, before they are waited for: every stage
  // wait of this tile is behind it by then (the ping-pong turn's hand-over,
  // grouped_gemm_sm90.cuh).
  template <int WN, int H, class Issued = NoIssued>
  __device__ __forceinline__ void mma_halves(uint32_t& it, float (&acc)[H][WN / 8][4], uint64_t a_desc0,
                                             uint64_t b_desc0, int kb0, int kb1, int lane,
                                             const Issued& issued = Issued{}) const {
    uint32_t prev_s = 0;
    for (int kb = kb0; kb < kb1; ++kb, ++it) {
      const uint32_t s = ring.wait(it);
      ptx::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < Cfg::BLOCK_K / Elem::kMmaK; ++kk)
#pragma unroll
        for (int h = 0; h < H; ++h)
          Elem::template mma<WN>(
              acc[h], ptx::smem_desc_advance(a_desc0, s * Cfg::STAGE_BYTES + h * 64 * 128 + kk * kStepBytes),
              ptx::smem_desc_advance(b_desc0, s * Cfg::STAGE_BYTES + kk * kStepBytes), kb != kb0 || kk != 0);
      ptx::wgmma_commit_group();
      if (kb + 1 == kb1) issued();
      ptx::wgmma_wait_group<1>();
      if (kb > kb0 && lane == 0) ring.release(prev_s);
      prev_s = s;
    }
    ptx::wgmma_wait_group<0>();
#pragma unroll
    for (int h = 0; h < H; ++h) ptx::fence_operands(acc[h]);
    if (lane == 0) ring.release(prev_s);
  }

 private:
  template <int WN, class Promote>
  __device__ __forceinline__ void mma_promoted(uint32_t& it, float (&acc)[WN / 8][4], uint64_t a_desc0,
                                               uint64_t b_desc0, int kb0, int kb1, int lane,
                                               const Promote& promote) const {
    float tmp[WN / 8][4];
    const int warp = (int(threadIdx.x) >> 5) & 3;  // the warp in its warpgroup
    for (int kb = kb0; kb < kb1; ++kb, ++it) {
      const uint32_t s = ring.wait(it);
      ptx::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < Cfg::BLOCK_K / Elem::kMmaK; ++kk)
        Elem::template mma<WN>(tmp, ptx::smem_desc_advance(a_desc0, s * Cfg::STAGE_BYTES + kk * kStepBytes),
                               ptx::smem_desc_advance(b_desc0, s * Cfg::STAGE_BYTES + kk * kStepBytes), kk != 0);
      ptx::wgmma_commit_group();
      ptx::wgmma_wait_group<0>();
      ptx::fence_operands(tmp);
      if (lane == 0) ring.release(s);
      promote.template apply<WN>(acc, tmp, kb, kb == kb0, warp, lane);
    }
  }
};

}  // namespace xstage::gemm
