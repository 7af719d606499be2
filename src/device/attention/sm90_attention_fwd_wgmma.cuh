#pragma once
// sm90_bf16_attention_fwd_wgmma: the Hopper-native attention forward
// (non-causal, bf16 in and out, fp32 accumulation), same contract as
// sm90_bf16_attention_fwd (epilogue and scheduler policies, [B, S, H, D]
// strided tensors, any S_q / S_kv), FlashAttention-3 structure in our words:
//   - warp specialisation: warpgroup 0 is the producer; one of its threads
//     issues TMA loads of the tile's Q (once) and of the K and V tiles into
//     two rings of STAGES slots (pipeline/stage_ring.cuh), K's and V's; it
//     gives its registers to the consumers (setmaxnreg);
//     with an epilogue that has the producer send (kProducerSends), its warp 1
//     sends the staged output rows (remote/epilogue_producer_paced.cuh);
//   - warpgroups 1 and 2 are consumers of 64 query rows each:
//     S = Q K^T by wgmma with both operands in (128-byte swizzled) shared
//     memory, online softmax in registers (the wgmma accumulator layout per
//     warp is the mma.sync one, so the quad reductions of the mma.sync kernel
//     carry over; the scale is folded into the exponent's FMA),
//     O += P V by wgmma with P straight from registers and V read through an
//     MN-major (transposed) descriptor;
//   - the schedule of GEMMs against softmax is a template parameter
//     (config_wgmma.cuh: basic, overlap, pingpong);
//   - ragged edges: the TMA unit zero-fills rows past S_q / S_kv (nothing is
//     read there), keys >= S_kv are left out of the row max and get p = 0 on
//     the last KV tile, and the epilogue policy skips rows >= S_q.
// Epilogue contract (as the mma.sync kernel, with the 256 consumer threads in
// the role of the CTA and their index 0..255 as `tid`): in every KV step
// Epilogue::mainloop_step (an epilogue with kOwnStaging sends the previous
// tile's staged rows there); after the mainloop flush and a consumer barrier
// (kOwnStaging), before_store and a consumer barrier (kBeforeStore); each
// consumer warp stages its 16 rows as bf16 in shared memory (a region of their
// own, not Q's, that nothing else writes: kOwnStaging needs no extra space
// here) and calls Epilogue::store_rows and store_lse; after a named barrier
// over the consumers they all call Epilogue::tile_done, then another barrier
// before the staging rows are reused; flush (kOwnStaging), a barrier and
// finish once the CTA has no tiles left.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <cuda.h>

#include "device/attention/attention_params.hpp"
#include "device/attention/config_wgmma.cuh"
#include "device/attention/epilogue_local.cuh"
#include "device/attention/online_softmax.cuh"
#include "device/epilogue/staged_rows.cuh"
#include "device/epilogue/traits.cuh"
#include "device/pipeline/stage_ring.cuh"
#include "device/ptx/math.cuh"
#include "device/sched/attention_tile.hpp"
#include "device/ptx/mbarrier.cuh"
#include "device/ptx/tma.cuh"
#include "device/ptx/wgmma.cuh"

namespace xstage::attention {

// Tensor maps of Q, K and V (4-D: D, S, H, B), built by the launcher.
struct AttnTmaMaps {
  CUtensorMap q, k, v;
};

namespace wgmma_detail {

// Online softmax of the wgmma kernel (same register layout and quad reductions
// as OnlineSoftmax in online_softmax.cuh), with the scale folded into the
// exponent's FMA: the running max is kept on the raw scores, signed by the
// scale's sign (sg * s, sg = +-1, so that a negative scale needs no extra
// multiply either), and p = 2^(s * scale_log2 - m * |scale_log2|) is one FFMA
// and one MUFU.EX2 an element instead of FMUL, FADD and MUFU. Masked keys get
// p = 0 by a select after the exponential (scale = 0 stays NaN-free).
template <int N_BLOCKS>
struct OnlineSoftmaxFma {
  float m[2];  // running max of sg * raw score, rows g and g + 8
  float l[2];  // this thread's partial row sums (quad-reduced in finalize)

  __device__ __forceinline__ void init() {
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.f;
  }

  // s: raw scores Q.K^T of one tile, turned into probabilities in place;
  // columns >= cols_valid (tile-relative) are masked out. corr: the O rescale
  // factors of rows g, g + 8.
  template <bool MASK>
  __device__ __forceinline__ void step(float (&s)[N_BLOCKS][4], float scale_log2, int cols_valid, int lane,
                                       float (&corr)[2]) {
    const int c0 = 2 * (lane & 3);
    const bool neg = scale_log2 < 0.f;
    const float asc = fabsf(scale_log2);
    auto masked = [&](int nb, int i) { return MASK && nb * 8 + c0 + (i & 1) >= cols_valid; };
    float mx[2] = {m[0], m[1]};
    if (!neg) {
#pragma unroll
      for (int nb = 0; nb < N_BLOCKS; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) mx[i >> 1] = fmaxf(mx[i >> 1], masked(nb, i) ? -INFINITY : s[nb][i]);
    } else {
#pragma unroll
      for (int nb = 0; nb < N_BLOCKS; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) mx[i >> 1] = fmaxf(mx[i >> 1], masked(nb, i) ? -INFINITY : -s[nb][i]);
    }
    float neg_ms[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      // First tile: m = -inf, nothing to rescale (and no (-inf) * 0 when the scale is 0).
      corr[r] = m[r] == -INFINITY ? 0.f : ptx::ex2_approx((m[r] - mx[r]) * asc);
      m[r] = mx[r];
      neg_ms[r] = -mx[r] * asc;
    }
    float sum[2] = {0.f, 0.f};
#pragma unroll
    for (int nb = 0; nb < N_BLOCKS; ++nb) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float e = ptx::ex2_approx(fmaf(s[nb][i], scale_log2, neg_ms[i >> 1]));
        if (masked(nb, i)) e = 0.f;
        s[nb][i] = e;
        sum[i >> 1] += e;
      }
    }
    l[0] = l[0] * corr[0] + sum[0];
    l[1] = l[1] * corr[1] + sum[1];
  }

  __device__ __forceinline__ void finalize() {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
  }

  // Natural-log log-sum-exp of the scaled scores of row r.
  __device__ __forceinline__ float lse(int r, float scale_log2) const {
    return (m[r] * fabsf(scale_log2) + __log2f(l[r])) * 0.69314718055994531f;
  }
};

// P (fp32 probabilities in the accumulator layout) to bf16 A fragments, one per k step of 16 keys.
template <int BN>
__device__ __forceinline__ void pack_p(uint32_t (&pf)[BN / 16][4], const float (&s)[BN / 8][4]) {
#pragma unroll
  for (int j = 0; j < BN / 16; ++j) {
    pf[j][0] = ptx::pack_bf16x2(s[2 * j][0], s[2 * j][1]);
    pf[j][1] = ptx::pack_bf16x2(s[2 * j][2], s[2 * j][3]);
    pf[j][2] = ptx::pack_bf16x2(s[2 * j + 1][0], s[2 * j + 1][1]);
    pf[j][3] = ptx::pack_bf16x2(s[2 * j + 1][2], s[2 * j + 1][3]);
  }
}

}  // namespace wgmma_detail

template <int D, class Epilogue, class Scheduler, int SCHEDULE = kWgmmaPingpong, int BLOCK_N = kWgmmaDefaultBlockN<D>,
          int CWGS = 2>
__global__ void __launch_bounds__(Sm90WgmmaAttnConfig<D, BLOCK_N, CWGS>::THREADS, 1)
    sm90_bf16_attention_fwd_wgmma(const MainloopParams p, const typename Epilogue::Params ep,
                                  const typename Scheduler::Params sp, const __grid_constant__ AttnTmaMaps tm) {
  using Cfg = Sm90WgmmaAttnConfig<D, BLOCK_N, CWGS>;
  constexpr int BM = Cfg::BLOCK_M, BN = Cfg::BLOCK_N, ST = Cfg::SMEM_STRIDE, STAGES = Cfg::STAGES;
  constexpr int NCT = Cfg::CONSUMER_THREADS;

  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t s_base = ptx::smem_addr(smem);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + Cfg::OFF_BAR);
  // Rings of the producer/consumer protocol (pipeline/stage_ring.cuh): the
  // tile's Q (one slot, a use per tile), K and V (STAGES slots each, a use
  // per KV step), and the staged output rows' hand-over to the producer when
  // it sends them (kSends; one slot, the consumers fill it).
  using QRing = pipeline::StageRing<1>;
  using KvRing = pipeline::StageRing<STAGES>;
  const QRing q_ring(bars);
  const KvRing k_ring(bars + QRing::kBarriers);
  const KvRing v_ring(bars + QRing::kBarriers + KvRing::kBarriers);
  const QRing o_ring(bars + QRing::kBarriers + 2 * KvRing::kBarriers);
  static_assert(2 * QRing::kBarriers + 2 * KvRing::kBarriers == Cfg::NUM_BARRIERS, "the barriers the config plans");
  constexpr bool kSends = epilogue::ProducerSends<Epilogue>::value;
  uint16_t* so = reinterpret_cast<uint16_t*>(smem + Cfg::OFF_O);  // the tile's staged output rows [BM][ST]
  // KV steps the loader has issued, over the CTA's tiles (the sender's pace;
  // written and read with atomics: plain volatile accesses are a data race).
  uint32_t* progress = reinterpret_cast<uint32_t*>(smem + Cfg::OFF_PROGRESS);
  using Coord = typename Scheduler::Coord;
  Coord* tile_slot = reinterpret_cast<Coord*>(smem + Cfg::OFF_TILE);
  static_assert(sizeof(Coord) <= 16, "the tile slot holds 16 bytes");
  static_assert(std::is_empty_v<typename Scheduler::SharedStorage>,
                "sm90_bf16_attention_fwd_wgmma reserves no shared memory for its scheduler");

  const int tid = threadIdx.x;
  if (tid == 0) {
    // Every consumer thread releases Q: each has read the tile slot before
    // its own arrival, so the producer's next write of the slot is ordered
    // after every read without leaning on warp convergence (racecheck
    // flagged the per-warp arrival once CTAs ran several tiles).
    q_ring.init(Cfg::CONSUMER_THREADS);
    k_ring.init(Cfg::CONSUMER_WARPS);
    v_ring.init(Cfg::CONSUMER_WARPS);
    // Every writer of the staging rows arrives on o_full and every lane of
    // the sender on o_empty, each after its own accesses (racecheck does not
    // follow one thread's arrival through a barrier the others passed).
    o_ring.init(32, NCT);
    *progress = 0;
    ptx::mbar_fence_init();
  }
  __syncthreads();  // the last CTA-wide barrier: the roles split below

  const Scheduler sched(tile_shape(p), sp, BM);
  const auto walk = sched.walk();
  const int n_kv = (p.S_kv + BN - 1) / BN;  // >= 1: S_kv >= 1

  if (tid < 128) {
    // ---------------- producer warpgroup
    ptx::setmaxnreg_dec<kSends ? Cfg::SENDING_PRODUCER_REGS : Cfg::PRODUCER_REGS>();
    if (tid == 0) {
      ptx::tma_prefetch_descriptor(&tm.q);
      ptx::tma_prefetch_descriptor(&tm.k);
      ptx::tma_prefetch_descriptor(&tm.v);
      uint32_t it = 0, tc = 0;
      for (auto w = walk.first(); walk.valid(w); w = walk.next(w), ++tc) {
        sched.wait_ready(w);
        const Coord c = sched.coord(w);
        q_ring.acquire(tc);  // both consumer warpgroups are done with the last Q
        // The tile's coordinates for the consumers, published by the arrive
        // (release at CTA scope) that their wait on q_full acquires: they
        // need not repeat the scheduler's divisions and table loads on the
        // path between two tiles.
        *tile_slot = c;
        q_ring.expect_bytes(0, Cfg::Q_BYTES);
#pragma unroll
        for (int cb = 0; cb < Cfg::COL_BLOCKS; ++cb)
          ptx::tma_load_4d(smem + Cfg::OFF_Q + cb * Cfg::Q_BLOCK_BYTES, &tm.q, q_ring.full, cb * 64, c.m_block * BM,
                           c.h, c.b);
        for (int j = 0; j < n_kv; ++j, ++it) {
          const uint32_t s = k_ring.acquire(it);
          k_ring.expect_bytes(s, Cfg::KV_BYTES);
#pragma unroll
          for (int cb = 0; cb < Cfg::COL_BLOCKS; ++cb)
            ptx::tma_load_4d(smem + Cfg::OFF_K + s * Cfg::KV_BYTES + cb * Cfg::KV_BLOCK_BYTES, &tm.k, k_ring.full + s,
                             cb * 64, j * BN, c.h, c.b);
          v_ring.acquire(it);
          v_ring.expect_bytes(s, Cfg::KV_BYTES);
#pragma unroll
          for (int cb = 0; cb < Cfg::COL_BLOCKS; ++cb)
            ptx::tma_load_4d(smem + Cfg::OFF_V + s * Cfg::KV_BYTES + cb * Cfg::KV_BLOCK_BYTES, &tm.v, v_ring.full + s,
                             cb * 64, j * BN, c.h, c.b);
          if constexpr (kSends) atomicExch_block(progress, it + 1);  // the sender's pace: step it is on its way
        }
      }
    } else if (tid / 32 == 1) {
      if constexpr (kSends)
        Epilogue::template sender<D, ST>(ep, sched, n_kv, BM, so, o_ring, progress, tid & 31);
    }
    return;
  }

  // ---------------- consumer warpgroups
  ptx::setmaxnreg_inc<kSends ? Cfg::SENDING_CONSUMER_REGS : Cfg::CONSUMER_REGS>();
  const int ctid = tid - 128;           // 0 .. 255, the id epilogue policies see
  const int cwg = ctid / 128;           // consumer warpgroup: query rows 64 cwg .. 64 cwg + 63
  const int wwarp = (ctid / 32) % 4;    // warp within the warpgroup: its 16 rows
  const int lane = tid & 31;
  constexpr bool OVERLAP = SCHEDULE != kWgmmaBasic;
  constexpr bool PINGPONG = SCHEDULE == kWgmmaPingpong;

  // Descriptors without the stage / k-step offsets (added to the address field).
  const uint64_t q_desc0 = ptx::make_smem_desc_sw128(s_base + Cfg::OFF_Q + cwg * 64 * 128, 16, 1024);
  const uint64_t k_desc0 = ptx::make_smem_desc_sw128(s_base + Cfg::OFF_K, 16, 1024);
  const uint64_t v_desc0 = ptx::make_smem_desc_sw128(s_base + Cfg::OFF_V, Cfg::KV_BLOCK_BYTES, 1024);
  auto desc_add = [](uint64_t d, uint32_t bytes) { return d + uint64_t(bytes >> 4); };

  float s[BN / 8][4];
  float o[D / 8][4];
  uint32_t pf[BN / 16][4];

  auto issue_qk = [&](uint32_t stage) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t cb = kk / 4, in = (kk % 4) * 32;
      ptx::wgmma_ss_bf16<BN>(s, desc_add(q_desc0, cb * Cfg::Q_BLOCK_BYTES + in),
                             desc_add(k_desc0, stage * Cfg::KV_BYTES + cb * Cfg::KV_BLOCK_BYTES + in), kk > 0);
    }
  };
  auto issue_pv = [&](uint32_t stage) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
      ptx::wgmma_rs_bf16_tb<D>(o, pf[kk], desc_add(v_desc0, stage * Cfg::KV_BYTES + kk * 16 * 128), 1);
  };
  auto release = [&](const KvRing& ring, uint32_t slot) {  // one arrival per consumer warp
    if (lane == 0) ring.release(slot);
  };
  // Ping-pong turns: warpgroup w waits on barrier 2 + w (its 128 threads and
  // the 128 of the warpgroup before it), then lets the next one go; turns go
  // round 0, 1, .., CWGS - 1, 0, ...
  constexpr int TURN_THREADS = 256;
  const int next_wg = cwg + 1 == CWGS ? 0 : cwg + 1;
  auto turn_begin = [&]() {
    if constexpr (PINGPONG) ptx::named_bar_sync(Cfg::BAR_PINGPONG + cwg, TURN_THREADS);
  };
  auto turn_end = [&](bool skip) {
    if constexpr (PINGPONG) {
      if (!skip) ptx::named_bar_arrive(Cfg::BAR_PINGPONG + next_wg, TURN_THREADS);
    }
  };
  if constexpr (PINGPONG) {  // the last warpgroup lets warpgroup 0 go first
    if (cwg == CWGS - 1 && walk.valid(walk.first())) ptx::named_bar_arrive(Cfg::BAR_PINGPONG + 0, TURN_THREADS);
  }

  typename Epilogue::Pending pending{};  // what the epilogue carries from tile to tile
  uint32_t it = 0, tc = 0;
  for (auto w = walk.first(); walk.valid(w); w = walk.next(w), ++tc) {
    const bool last_tile = walk.is_last(w);
#pragma unroll
    for (int db = 0; db < D / 8; ++db) o[db][0] = o[db][1] = o[db][2] = o[db][3] = 0.f;
    wgmma_detail::OnlineSoftmaxFma<BN / 8> sm;
    sm.init();
    float corr[2];
    q_ring.wait(tc);
    // The producer wrote it before the arrive this wait saw; it writes the
    // next one only after every consumer thread has released this Q (q_empty).
    const Coord c = *tile_slot;
    const int m0 = c.m_block * BM;

    auto softmax = [&](int j) {
      const int cols_valid = p.S_kv - j * BN;
      if (cols_valid < BN)
        sm.template step<true>(s, p.scale_log2, cols_valid, lane, corr);
      else
        sm.template step<false>(s, p.scale_log2, BN, lane, corr);
    };

    // The epilogue's share of KV step j (paced sends of the previous tile),
    // placed while this warpgroup's GEMMs run on the tensor cores.
    auto epilogue_step = [&](int j) {
      Epilogue::template mainloop_step<D, ST, NCT>(ep, pending, so, j, n_kv, ctid);
    };

    if constexpr (!OVERLAP) {
      for (int j = 0; j < n_kv; ++j, ++it) {
        const uint32_t st = k_ring.wait(it);
        ptx::wgmma_fence();
        issue_qk(st);
        ptx::wgmma_commit_group();
        epilogue_step(j);
        ptx::wgmma_wait_group<0>();
        ptx::fence_operands(s);
        release(k_ring, st);
        if (j == n_kv - 1) q_ring.release(0);
        softmax(j);
        rescale_rows<D / 8>(o, corr);
        wgmma_detail::pack_p<BN>(pf, s);
        v_ring.wait(it);
        ptx::wgmma_fence();
        issue_pv(st);
        ptx::wgmma_commit_group();
        ptx::wgmma_wait_group<0>();
        ptx::fence_operands(o);
        release(v_ring, st);
      }
    } else {
      // KV tile 0: S_0 alone.
      uint32_t pit = it, pst = k_ring.wait(it);  // the step whose P V is pending, and its slot
      turn_begin();
      ptx::wgmma_fence();
      issue_qk(pst);
      ptx::wgmma_commit_group();
      turn_end(false);
      epilogue_step(0);
      ptx::wgmma_wait_group<0>();
      ptx::fence_operands(s);
      release(k_ring, pst);
      if (n_kv == 1) q_ring.release(0);
      softmax(0);  // O is zero: corr unused
      wgmma_detail::pack_p<BN>(pf, s);
      ++it;
      // Steady state: S_j and O += P_{j-1} V_{j-1} in flight together.
      for (int j = 1; j < n_kv; ++j, ++it) {
        const uint32_t st = k_ring.wait(it);
        v_ring.wait(pit);
        turn_begin();
        ptx::wgmma_fence();
        issue_qk(st);
        ptx::wgmma_commit_group();
        issue_pv(pst);
        ptx::wgmma_commit_group();
        turn_end(false);
        epilogue_step(j);
        ptx::wgmma_wait_group<1>();  // S_j landed; the P V GEMM may still run
        ptx::fence_operands(s);
        release(k_ring, st);
        if (j == n_kv - 1) q_ring.release(0);
        softmax(j);
        ptx::wgmma_wait_group<0>();
        ptx::fence_operands(o);
        ptx::fence_operands(pf);
        release(v_ring, pst);
        rescale_rows<D / 8>(o, corr);
        wgmma_detail::pack_p<BN>(pf, s);
        pst = st, pit = it;
      }
      // Tail: O += P_last V_last.
      v_ring.wait(pit);
      turn_begin();
      ptx::wgmma_fence();
      issue_pv(pst);
      ptx::wgmma_commit_group();
      turn_end(cwg == CWGS - 1 && last_tile);  // nobody waits for the last warpgroup's very last turn
      ptx::wgmma_wait_group<0>();
      ptx::fence_operands(o);
      release(v_ring, pst);
    }

    // ---- epilogue: send and publish what the previous tile left pending,
    // normalise, stage this warp's 16 rows, hand them to the policy.
    if constexpr (Epilogue::kOwnStaging) {
      Epilogue::template flush<D, ST, NCT>(ep, pending, so, ctid);
      ptx::named_bar_sync(Cfg::BAR_EPILOGUE, NCT);  // staging rows read, every row stored
    }
    if constexpr (Epilogue::kBeforeStore) {
      Epilogue::before_store(ep, pending, ctid);
      ptx::named_bar_sync(Cfg::BAR_EPILOGUE, NCT);  // no store of this tile is in flight while thread 0 fences
    }
    sm.finalize();
    const float inv[2] = {1.f / sm.l[0], 1.f / sm.l[1]};
    rescale_rows<D / 8>(o, inv);
    const int wrow = cwg * 64 + wwarp * 16;  // first row of this warp in the tile
    if constexpr (kSends) {  // the producer's copies have read the previous tile's rows
      if (tc > 0) o_ring.acquire(tc);
    }
    uint16_t* srows = so + wrow * ST;
    epilogue::stage_o_rows<D, ST>(srows, o, lane);
    __syncwarp();
    const int row0 = m0 + wrow;
    Epilogue::template store_rows<D, ST>(ep, c, row0, p.S_q, srows, lane);
    if ((lane & 3) == 0) {
      const int g = lane >> 2;
      Epilogue::store_lse(ep, c, row0 + g, p.S_q, p.H, sm.lse(0, p.scale_log2));
      Epilogue::store_lse(ep, c, row0 + g + 8, p.S_q, p.H, sm.lse(1, p.scale_log2));
    }
    ptx::named_bar_sync(Cfg::BAR_EPILOGUE, NCT);  // every consumer warp's rows are stored (or issued)
    if constexpr (kSends) {  // ... or staged and fenced for the producer's copies
      o_ring.commit(0);
    }
    Epilogue::tile_done(ep, c, m0, BM, p.S_q, ctid, pending);
    ptx::named_bar_sync(Cfg::BAR_EPILOGUE, NCT);  // the next tile's staging overwrites the rows
  }
  if constexpr (Epilogue::kOwnStaging) {
    Epilogue::template flush<D, ST, NCT>(ep, pending, so, ctid);
    ptx::named_bar_sync(Cfg::BAR_EPILOGUE, NCT);
  }
  if constexpr (kSends) {  // every copy of the CTA complete (the producer's last arrival)
    if (tc > 0) o_ring.acquire(tc);
  }
  Epilogue::template finish<NCT>(ep, pending, sched, BM, p.S_q, ctid,
                                 [] { ptx::named_bar_sync(Cfg::BAR_EPILOGUE, NCT); });
  Epilogue::template receive<NCT>(ep, ctid, [] { ptx::named_bar_sync(Cfg::BAR_EPILOGUE, NCT); });
}

}  // namespace xstage::attention
