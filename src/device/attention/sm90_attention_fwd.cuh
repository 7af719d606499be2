#pragma once
// sm90_bf16_attention_fwd: non-causal attention forward, bf16 in and out, fp32
// accumulation and online softmax, FlashAttention-2 structure on warp-level
// mma.sync (sm90_attention_fwd_wgmma.cuh is the faster, warp-specialised one;
// docs/design/attention.md):
//   - a CTA owns BLOCK_M query rows of one (batch, head) (the scheduler policy
//     says which), 8 warps x 16 rows; Q is loaded once into registers;
//   - it walks the KV sequence in BLOCK_N tiles, K and V double-buffered in
//     shared memory with cp.async (tile j+1 loads while tile j computes);
//   - per tile and warp: S = Q K^T (mma.sync), online softmax in registers,
//     O += P V with P straight from the S registers;
//   - the output tile goes through the epilogue policy: before_store (after
//     the mainloop: the fused all-to-all publishes the previous tile's flags
//     there), store_rows per warp, then after a CTA barrier tile_done, and
//     finish (given the scheduler, to revisit the CTA's tiles) once the CTA
//     has no tiles left. The local store does nothing in
//     the three hooks.
#include <cstdint>
#include <type_traits>

#include "device/attention/attention_params.hpp"
#include "device/attention/config.cuh"
#include "device/attention/epilogue_local.cuh"
#include "device/attention/mma_bf16.cuh"
#include "device/attention/online_softmax.cuh"
#include "device/attention/tile_loader.cuh"
#include "device/epilogue/staged_rows.cuh"
#include "device/epilogue/traits.cuh"
#include "device/ptx/cp_async.cuh"

namespace xstage::attention {

template <int D, class Epilogue, class Scheduler>
__global__ void __launch_bounds__(Sm90AttnFwdConfig<D>::THREADS, Sm90AttnFwdConfig<D>::MIN_BLOCKS)
    sm90_bf16_attention_fwd(const MainloopParams p, const typename Epilogue::Params ep,
                            const typename Scheduler::Params sp) {
  using Cfg = Sm90AttnFwdConfig<D>;
  constexpr int BM = Cfg::BLOCK_M, BN = Cfg::BLOCK_N, ST = Cfg::SMEM_STRIDE, THREADS = Cfg::THREADS;
  static_assert(Cfg::STAGES == 2, "sm90_bf16_attention_fwd: the mainloop is written for double buffering");
  static_assert(!epilogue::ProducerSends<Epilogue>::value,
                "sm90_bf16_attention_fwd: no producer warp here to send the rows (the wgmma kernel has one)");

  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* sq = smem;                                    // [BM][ST]; reused to stage O
  uint16_t* skv = smem + Cfg::Q_ELEMS;                    // stage s: K at s * 2 * KV_ELEMS, V after it
  // An epilogue that sends a tile's rows while the next tile computes stages
  // them in its own [BM][ST] buffer (after K/V), not in the Q rows.
  uint16_t* so = Epilogue::kOwnStaging ? skv + 2 * Cfg::STAGES * Cfg::KV_ELEMS : sq;
  auto sk = [&](int stage) { return skv + stage * 2 * Cfg::KV_ELEMS; };
  auto sv = [&](int stage) { return skv + stage * 2 * Cfg::KV_ELEMS + Cfg::KV_ELEMS; };

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const Scheduler sched(tile_shape(p), sp, BM);
  const int n_tiles = (p.S_kv + BN - 1) / BN;  // >= 1: S_kv >= 1
  const uint16_t* q_all = static_cast<const uint16_t*>(p.q);
  const uint16_t* k_all = static_cast<const uint16_t*>(p.k);
  const uint16_t* v_all = static_cast<const uint16_t*>(p.v);

  typename Epilogue::Pending pending{};  // what the epilogue carries from tile to tile (thread 0)
  static_assert(std::is_empty_v<typename Scheduler::SharedStorage>,
                "sm90_bf16_attention_fwd reserves no shared memory for its scheduler");
  const auto walk = sched.walk();
  for (auto w = walk.first(); walk.valid(w); w = walk.next(w)) {
    sched.wait_ready(w);
    const auto c = sched.coord(w);
    const int m0 = c.m_block * BM;
    const uint16_t* qb = q_all + int64_t(c.b) * p.q_stride_b + int64_t(c.h) * p.q_stride_h;
    const uint16_t* kb = k_all + int64_t(c.b) * p.k_stride_b + int64_t(c.h) * p.k_stride_h;
    const uint16_t* vb = v_all + int64_t(c.b) * p.v_stride_b + int64_t(c.h) * p.v_stride_h;

    // Prologue: Q and KV tile 0 in one group.
    load_tile_async<BM, D, ST, THREADS>(sq, qb, p.q_stride_s, m0, p.S_q, tid);
    load_tile_async<BN, D, ST, THREADS>(sk(0), kb, p.k_stride_s, 0, p.S_kv, tid);
    load_tile_async<BN, D, ST, THREADS>(sv(0), vb, p.v_stride_s, 0, p.S_kv, tid);
    ptx::cp_async_commit_group();

    uint32_t q[D / 16][4];
    float o[D / 8][4];
#pragma unroll
    for (int db = 0; db < D / 8; ++db) o[db][0] = o[db][1] = o[db][2] = o[db][3] = 0.f;
    OnlineSoftmax<BN / 8> sm;
    sm.init();

    for (int j = 0; j < n_tiles; ++j) {
      const int stage = j & 1;
      if (j + 1 < n_tiles) {
        // Buffer stage ^ 1 was last read in iteration j - 1, which ended with a CTA barrier.
        const int n1 = (j + 1) * BN;
        load_tile_async<BN, D, ST, THREADS>(sk(stage ^ 1), kb, p.k_stride_s, n1, p.S_kv, tid);
        load_tile_async<BN, D, ST, THREADS>(sv(stage ^ 1), vb, p.v_stride_s, n1, p.S_kv, tid);
        ptx::cp_async_commit_group();
        ptx::cp_async_wait_group<1>();  // everything but tile j + 1 has landed
      } else {
        ptx::cp_async_wait_group<0>();
      }
      __syncthreads();  // tile j (and Q) visible to every warp
      Epilogue::template mainloop_step<D, ST, THREADS>(ep, pending, so, j, n_tiles, tid);
      if (j == 0) load_q_fragments<D, ST>(q, sq + warp * 16 * ST, lane);

      float s[BN / 8][4];
      warp_gemm_qk<D, BN, ST>(s, q, sk(stage), lane);
      float corr[2];
      const int cols_valid = p.S_kv - j * BN;
      if (cols_valid < BN)
        sm.template step<true>(s, p.scale_log2, cols_valid, lane, corr);
      else
        sm.template step<false>(s, p.scale_log2, BN, lane, corr);
      rescale_rows<D / 8>(o, corr);
      warp_gemm_pv<D, BN, ST>(o, s, sv(stage), lane);
      __syncthreads();  // every warp is done with buffer `stage` before it is refilled
    }

    // Epilogue: publish what the previous tile left pending, normalise, stage
    // this warp's rows in its own Q rows (only this warp ever read them), hand
    // them to the policy.
    if constexpr (Epilogue::kOwnStaging) {
      Epilogue::template flush<D, ST, THREADS>(ep, pending, so, tid);
      __syncthreads();  // the staging rows are read and every row stored, before flags and restaging
    }
    if constexpr (Epilogue::kBeforeStore) {
      Epilogue::before_store(ep, pending, tid);
      __syncthreads();  // no store of this tile is in flight while thread 0 fences
    }
    sm.finalize();
    const float inv[2] = {1.f / sm.l[0], 1.f / sm.l[1]};
    rescale_rows<D / 8>(o, inv);
    uint16_t* srows = so + warp * 16 * ST;
    epilogue::stage_o_rows<D, ST>(srows, o, lane);
    __syncwarp();
    const int row0 = m0 + warp * 16;
    Epilogue::template store_rows<D, ST>(ep, c, row0, p.S_q, srows, lane);
    if ((lane & 3) == 0) {
      const int g = lane >> 2;
      Epilogue::store_lse(ep, c, row0 + g, p.S_q, p.H, sm.lse(0));
      Epilogue::store_lse(ep, c, row0 + g + 8, p.S_q, p.H, sm.lse(1));
    }
    __syncthreads();  // every warp's rows are stored (or their stores issued)
    Epilogue::tile_done(ep, c, m0, BM, p.S_q, tid, pending);
    __syncthreads();  // the next tile's Q load overwrites the staged rows
  }
  if constexpr (Epilogue::kOwnStaging) {
    Epilogue::template flush<D, ST, THREADS>(ep, pending, so, tid);
    __syncthreads();
  }
  Epilogue::template finish<THREADS>(ep, pending, sched, BM, p.S_q, tid, [] { __syncthreads(); });
  Epilogue::template receive<THREADS>(ep, tid, [] { __syncthreads(); });
}

// Dynamic shared memory of sm90_bf16_attention_fwd<D, Epilogue, ...>.
template <int D, class Epilogue>
constexpr size_t sm90_attention_fwd_smem_bytes() {
  using Cfg = Sm90AttnFwdConfig<D>;
  return Cfg::SMEM_BYTES + (Epilogue::kOwnStaging ? size_t(Cfg::Q_ELEMS) * 2 : 0);
}

}  // namespace xstage::attention
