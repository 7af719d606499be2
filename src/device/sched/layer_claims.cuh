#pragma once
// The fused MoE layer's tile order (fused_layer_sm90.cuh): L1 tiles (rows of
// expert e x W13[e], SwiGLU into h) and L2 tiles (h x W2[e], stored to the
// owners' combine buffers) of every expert of the launch, claimed one at a
// time by each CTA's producer thread from two global counters: next L1 tile,
// next L2 tile. Within a GEMM the order is the grouped GEMM's (expert, then
// n-block, m-block fastest: concurrent CTAs share one expert's weight tiles
// in L2). The policy decides which counter a CTA claims from next.
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
//
// Policies (docs/design/moe-layer.md):
//   expert-wave: wave w = the experts whose first L1 tile lies in [w W, (w+1) W);
//     L2 tiles of wave w once all its L1 tiles are claimed, L1 tiles of wave
//     w+1 once all L2 tiles of wave w are claimed. L2's stores leave in bursts.
//   share: after `lag` L1 tiles past an expert's last, its L2 tiles may go;
//     from the point where the first one may, L2 is claimed while its claimed
//     work (tiles x K) is at most l2_share of the work claimed since, so L2
//     tiles, and their stores, spread over the L1 tiles left.
#include <cstdint>

#include "device/moe/fused_layer_params.hpp"
#include "device/ptx/atomic_gpu.cuh"

namespace xstage::sched {

struct LayerTask {
  int gemm;  // 0: no work left, 1: L1, 2: L2
  int index;  // claim index within its GEMM
  int expert, m_block, n_block;
  int row_begin, row_end;
  int m_blocks;  // of the expert (its L1 tiles: m_blocks x n-blocks of L1)
};

// One GEMM's tiles over the experts: moves forward only, as a CTA's claims
// from one counter only increase.
struct ExpertCursor {
  int expert = -1, base = 0, mb_before = 0, row_begin = 0, row_end = 0, m_blocks = 0;
};

struct LayerClaims {
  const int32_t* offs;
  int32_t* counters;
  int E, rows_cap, block_m, n1, n2, k1, k2, schedule, wave_tiles, lag;
  float share;
  int total_mb = 0, total1 = 0, total2 = 0, t1_start = 0;
  ExpertCursor c1, c2;

  __device__ LayerClaims(const moe::FusedLayerParams& p, int bm, int bn)
      : offs(p.offs),
        counters(p.counters),
        E(p.E_run),
        rows_cap(p.rows_cap),
        block_m(bm),
        n1(2 * p.inter / bn),
        n2(p.hidden / bn),
        k1(p.hidden),
        k2(p.inter),
        schedule(p.schedule),
        wave_tiles(p.wave_tiles > 0 ? p.wave_tiles : 2 * int(gridDim.x)),
        lag(p.lag_tiles),
        share(p.l2_share) {
    ExpertCursor c;
    int first_l1_end = -1;  // L1 tiles through the first expert that has rows
    while (c.expert < E) {
      enter(c);
      if (first_l1_end < 0 && c.m_blocks > 0) first_l1_end = n1 * (c.mb_before + c.m_blocks);
    }
    total_mb = c.mb_before;
    total1 = total_mb * n1, total2 = total_mb * n2;
    // The spread starts where the first L2 tile may start: counted from the
    // launch's first claim, L2 would be behind its share at that point and
    // claim a burst of tiles (a whole expert's, with few large experts).
    t1_start = min(max(first_l1_end, 0) + lag, total1);
    if (share <= 0.f) {  // L2's share of the work left from there: an even spread
      const float w1 = float(total1 - t1_start) * float(k1), w2 = float(total2) * float(k2);
      share = w1 + w2 > 0.f ? w2 / (w1 + w2) : 0.f;
    }
    enter(c1), enter(c2);
  }

  // The next tile for this CTA (gemm 0 once both GEMMs are exhausted).
  __device__ LayerTask claim() {
    for (;;) {
      const int t1 = min(ptx::ld_relaxed_gpu_s32(counters + 0), total1);
      if (parked >= 0) {
        if (allowed(parked, t1)) {
          const int t = parked;
          parked = -1;
          return task(2, t, c2);
        }
        const int t = atomicAdd(counters + 0, 1);
        if (t < total1) return l1_task(t);
        continue;  // L1 exhausted: the parked tile is allowed on the next pass
      }
      const int t2 = min(ptx::ld_relaxed_gpu_s32(counters + 1), total2);
      if (t1 >= total1 && t2 >= total2) return LayerTask{0, 0, 0, 0, 0, 0, 0, 0};
      bool take2;
      if (t2 >= total2) {
        take2 = false;
      } else if (t1 >= total1) {
        take2 = true;
      } else {
        seek(c2, t2, n2);
        if (schedule == moe::kScheduleExpertWave) {
          seek(c1, t1, n1);
          take2 = wave(c2) < wave(c1);  // every L1 tile of that wave is claimed
        } else {
          const float w1 = float(max(t1 - t1_start, 0)) * float(k1), w2 = float(t2) * float(k2);
          const bool want = w2 <= share * (w1 + w2);
          take2 = want && allowed(t2, t1);
        }
      }
      if (!take2) {
        const int t = atomicAdd(counters + 0, 1);
        if (t < total1) return l1_task(t);
        continue;
      }
      const int t = atomicAdd(counters + 1, 1);
      if (t >= total2) continue;
      seek(c2, t, n2);
      if (allowed(t, min(ptx::ld_relaxed_gpu_s32(counters + 0), total1))) return task(2, t, c2);
      parked = t;
    }
  }

 private:
  int parked = -1;  // an L2 tile claimed before its expert's L1 tiles were

  __device__ LayerTask l1_task(int t) {
    seek(c1, t, n1);
    return task(1, t, c1);
  }
  __device__ static LayerTask task(int gemm, int t, const ExpertCursor& c) {
    const int local = t - c.base;
    return LayerTask{gemm, t, c.expert, local % c.m_blocks, local / c.m_blocks, c.row_begin, c.row_end, c.m_blocks};
  }
  // May L2 tile t (c2 at it) run, with t1 L1 tiles claimed? Expert-wave: once
  // every L1 tile of its wave is claimed; share: of its expert, plus `lag`.
  __device__ bool allowed(int t, int t1) {
    seek(c2, t, n2);
    if (t1 >= total1) return true;
    if (schedule == moe::kScheduleExpertWave) {
      seek(c1, t1, n1);
      return wave(c2) < wave(c1);
    }
    return t1 >= n1 * (c2.mb_before + c2.m_blocks) + lag;
  }
  __device__ int wave(const ExpertCursor& c) const { return (n1 * c.mb_before) / wave_tiles; }
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
