#pragma once
// The fused MoE layer's tile order (moe/fused_layer_sm90.cuh), a dynamic
// scheduler of the contract in sched/README.md: L1 tiles (rows of expert e x
// W13[e], SwiGLU into h) and L2 tiles (h x W2[e], stored to the owners'
// combine buffers) of every expert of the launch, claimed one at a time by
// each CTA's producer thread from two global counters: next L1 tile, next L2
// tile. first() claims, next(w) claims again, valid(w) is false once both
// GEMMs are exhausted. Within a GEMM the order is the grouped GEMM's (expert,
// then n-block, m-block fastest: concurrent CTAs share one expert's weight
// tiles in L2). The policy (sched/claim_policy.hpp, shared with the
// simulator) decides which counter a CTA claims from next.
//
// Claims are atomic adds (a compare-and-swap per claim serialises every SM's
// claims on one L2 round trip each: ~1.4 M claims/s measured, far below the
// tile rate of small experts). A CTA decides which counter to claim from on
// the values it last read; the add then gives it a tile that may be further
// on. An L2 tile whose expert still has unclaimed L1 tiles is parked: the CTA
// claims and runs L1 tiles until the L2 tile is allowed, then runs it.
//
// Deadlock freedom without co-residency: an L2 tile enters its CTA's queue
// only once every L1 tile of its expert has been claimed, and a CTA runs its
// queue in order. Take the waiting L2 tile that entered a queue first: the
// L1 tiles it waits for were claimed before it entered, so each sits in a
// queue behind nothing that waits (a waiting tile ahead of one would have
// entered earlier still). So they finish, and the launch always progresses,
// however many of its CTAs the GPU holds at once (emulated ranks' launches
// share one GPU); parked tiles are waited on by nobody.
#include <cstdint>

#include "device/ptx/atomic_gpu.cuh"
#include "device/sched/claim_policy.hpp"

namespace xstage::sched {

// A claimed tile; gemm 0 is the item past the end (valid() false), which the
// client may hand on as its own end marker.
struct LayerTask {
  int gemm;  // 0: no work left, 1: L1, 2: L2
  int index;  // claim index within its GEMM
  int expert, m_block, n_block;
  int row_begin, row_end;
  int m_blocks;  // of the expert (its L1 tiles: m_blocks x n-blocks of L1)
};

// What the claims need of the launch; the client fills it.
struct LayerClaimsParams {
  const int32_t* offs = nullptr;  // [E] cumulative row ends (device)
  int32_t* counters = nullptr;    // [2] next L1 tile, next L2 tile: zero before the launch
  int E = 0, rows_cap = 0;        // experts; rows the offsets are clamped to
  int n1 = 0, n2 = 0;             // n-blocks of L1, of L2
  int k1 = 0, k2 = 0;             // K of L1, of L2 (a tile's work per output element)
  ClaimPolicyParams policy;
};

// One GEMM's tiles over the experts: moves forward only, as a CTA's claims
// from one counter only increase.
struct ExpertCursor {
  int expert = -1, base = 0, mb_before = 0, row_begin = 0, row_end = 0, m_blocks = 0;
};

struct LayerClaims {
  using Params = LayerClaimsParams;
  using Coord = LayerTask;
  struct SharedStorage {};  // the client hands claimed tiles to its consumers itself

  const int32_t* offs;
  int32_t* counters;
  int E, rows_cap, block_m, n1, n2;
  ClaimPolicy policy;
  ExpertCursor c1, c2;

  __device__ LayerClaims(const Params& p, int bm)
      : offs(p.offs),
        counters(p.counters),
        E(p.E),
        rows_cap(p.rows_cap),
        block_m(bm),
        n1(p.n1),
        n2(p.n2),
        policy(make_policy(p)) {
    enter(c1), enter(c2);
  }

  // The contract (sched/README.md): the claimer thread is its own walk.
  __device__ LayerClaims& walk() { return *this; }
  __device__ LayerTask first() { return claim(); }
  __device__ LayerTask next(const LayerTask&) { return claim(); }
  __device__ static bool valid(const LayerTask& w) { return w.gemm != 0; }
  __device__ static const LayerTask& coord(const LayerTask& w) { return w; }

  // Where tiles lie, for the policy (ClaimPolicy::choose).
  __device__ ExpertSpan l1_span_of_l2(int t2) {
    seek(c2, t2, n2);
    return {n1 * c2.mb_before, n1 * (c2.mb_before + c2.m_blocks)};
  }
  __device__ int l1_first(int t1) {
    seek(c1, t1, n1);
    return n1 * c1.mb_before;
  }

 private:
  int parked = -1;  // an L2 tile claimed before its expert's L1 tiles were

  // The launch's tile counts, walked once from the offsets.
  __device__ ClaimPolicy make_policy(const Params& p) const {
    ExpertCursor c;
    int first_l1_end = 0;  // L1 tiles through the first expert that has rows
    while (c.expert < E) {
      enter(c);
      if (first_l1_end == 0 && c.m_blocks > 0) first_l1_end = n1 * (c.mb_before + c.m_blocks);
    }
    return ClaimPolicy(p.policy, c.mb_before * n1, c.mb_before * n2, p.k1, p.k2, first_l1_end, int(gridDim.x));
  }

  __device__ LayerTask claim() {
    for (;;) {
      const int t1 = min(ptx::ld_relaxed_gpu_s32(counters + 0), policy.total1);
      if (parked >= 0) {
        if (policy.allowed(parked, t1, *this)) {
          const int t = parked;
          parked = -1;
          return l2_task(t);
        }
        const int t = atomicAdd(counters + 0, 1);
        if (t < policy.total1) return l1_task(t);
        continue;  // L1 exhausted: the parked tile is allowed on the next pass
      }
      const int t2 = min(ptx::ld_relaxed_gpu_s32(counters + 1), policy.total2);
      const int gemm = policy.choose(t1, t2, *this);
      if (gemm == 0) return LayerTask{};
      if (gemm == 1) {
        const int t = atomicAdd(counters + 0, 1);
        if (t < policy.total1) return l1_task(t);
        continue;
      }
      const int t = atomicAdd(counters + 1, 1);
      if (t >= policy.total2) continue;
      if (policy.allowed(t, min(ptx::ld_relaxed_gpu_s32(counters + 0), policy.total1), *this)) return l2_task(t);
      parked = t;
    }
  }
  __device__ LayerTask l1_task(int t) {
    seek(c1, t, n1);
    return task(1, t, c1);
  }
  __device__ LayerTask l2_task(int t) {
    seek(c2, t, n2);
    return task(2, t, c2);
  }
  __device__ static LayerTask task(int gemm, int t, const ExpertCursor& c) {
    const int local = t - c.base;
    return LayerTask{gemm, t, c.expert, local % c.m_blocks, local / c.m_blocks, c.row_begin, c.row_end, c.m_blocks};
  }
  // Offsets clamped into [previous end, rows_cap]: bad offsets make empty experts.
  __device__ void enter(ExpertCursor& c) const {
    c.mb_before += c.m_blocks;
    ++c.expert;
    c.row_begin = c.expert == 0 ? 0 : c.row_end;
    c.m_blocks = 0;
    if (c.expert >= E) return;
    int end = __ldg(offs + c.expert);
    end = end < c.row_begin ? c.row_begin : end > rows_cap ? rows_cap : end;
    c.row_end = end;
    c.m_blocks = (end - c.row_begin + block_m - 1) / block_m;
  }
  __device__ void seek(ExpertCursor& c, int t, int n) const {
    c.base = n * c.mb_before;
    while (c.expert < E && t >= c.base + c.m_blocks * n) {
      enter(c);
      c.base = n * c.mb_before;
    }
  }
};

}  // namespace xstage::sched
