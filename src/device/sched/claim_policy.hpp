#pragma once
// The fused MoE layer's claim policy: from which of the two GEMMs' counters
// (L1, L2) a claimer takes its next tile, given how many tiles of each are
// claimed. The device's claims (sched/layer_claims.cuh) and the simulator's
// (src/sim/moe_tile_claims.cpp) both compile this header, so the simulated
// order is the kernel's, ties included (the same float arithmetic), and the
// defaults that a 0 parameter stands for are defined here only.
//
// Orders (docs/design/scheduler.md):
//   expert-wave: wave w = the experts whose first L1 tile lies in
//     [w W, (w+1) W); L2 tiles of wave w once all its L1 tiles are claimed,
//     L1 tiles of wave w+1 once all L2 tiles of wave w are claimed.
//   share: an expert's L2 tiles may go `lag` L1 tiles after its last L1
//     tile; from where the first one may, L2 is claimed while its claimed
//     work (tiles x K) is at most `share` of the work claimed since.
#include "device/host_device.hpp"

namespace xstage::sched {

enum class ClaimOrder : int { expert_wave = 0, share = 1 };

// What the client chooses; a 0 selects the default named on each.
struct ClaimPolicyParams {
  ClaimOrder order = ClaimOrder::expert_wave;
  int wave_tiles = 0;    // expert-wave: L1 tiles a wave holds at least (0: claim_wave_tiles)
  float l2_share = 0.f;  // share: L2's share of the work claimed (0: claim_even_share)
  int lag_tiles = 0;     // share: L1 tiles claimed past an expert's last before its L2 may be
};

// Expert-wave's waves hold two grids of L1 tiles by default, as DeepGEMM sizes its waves.
XSTAGE_HD inline int claim_wave_tiles(int wave_tiles, int grid) { return wave_tiles > 0 ? wave_tiles : 2 * grid; }

// The interleaved schedule's lag when its plan gives none: the grid's SM
// count of L1 tiles, by when an expert's last L1 tile has most likely
// finished and its L2 tiles do not idle their SMs. The host resolves it
// (a plan chosen by the model keeps its own lag, 0 included).
XSTAGE_HD inline int claim_lag_tiles(int lag_tiles, int sms) { return lag_tiles > 0 ? lag_tiles : sms; }

// L1 tiles claimed where the spread starts: through the first expert that
// has rows (first_l1_end; 0 when none has), plus the lag, at most all.
// Counted from the launch's first claim instead, L2 would be behind its
// share there and claim a burst (a whole expert's tiles, with few large experts).
XSTAGE_HD inline long claim_share_start(long first_l1_end, long lag, long total1) {
  return first_l1_end + lag < total1 ? first_l1_end + lag : total1;
}

// The even spread: L2's share of the work left from the spread's start
// (w1: L1 work from there, w2: all L2 work).
XSTAGE_HD inline float claim_even_share(float w1, float w2) { return w1 + w2 > 0.f ? w2 / (w1 + w2) : 0.f; }

// The L1 tiles of one expert, [first, end) in L1's claim order.
struct ExpertSpan {
  int first, end;
};

struct ClaimPolicy {
  ClaimOrder order;
  int total1, total2;  // tiles of each GEMM in the launch
  float k1, k2;        // work of a tile of each GEMM, per output element (its K)
  int wave_tiles, lag;
  int t1_start;        // share: L1 tiles claimed where the spread starts
  float share;         // share: resolved (never 0 but with no L2 work)

  // first_l1_end: L1 tiles through the first expert with rows (0: none);
  // grid: the claimers of the launch (for the default wave).
  XSTAGE_HD ClaimPolicy(const ClaimPolicyParams& p, int l1_tiles, int l2_tiles, int k_l1, int k_l2, int first_l1_end,
                        int grid)
      : order(p.order),
        total1(l1_tiles),
        total2(l2_tiles),
        k1(float(k_l1)),
        k2(float(k_l2)),
        wave_tiles(claim_wave_tiles(p.wave_tiles, grid)),
        lag(p.lag_tiles),
        t1_start(int(claim_share_start(first_l1_end, lag, total1))),
        share(p.l2_share) {
    if (share <= 0.f) share = claim_even_share(float(total1 - t1_start) * k1, float(total2) * k2);
  }

  // The next claim with t1 L1 and t2 L2 tiles claimed: 1 (L1), 2 (L2) or 0
  // (none left). Tiles says where tiles lie (the claimer's cursors):
  //   ExpertSpan l1_span_of_l2(int t2)  the L1 tiles of L2 tile t2's expert
  //   int l1_first(int t1)              the first L1 tile of L1 tile t1's expert
  // and is asked only what the order needs.
  template <class Tiles>
  XSTAGE_HD int choose(int t1, int t2, Tiles& tiles) const {
    if (t2 >= total2) return t1 >= total1 ? 0 : 1;
    if (t1 >= total1) return 2;
    return within_share(t1, t2) && allowed(t2, t1, tiles) ? 2 : 1;
  }

  // May L2 tile t2 run with t1 L1 tiles claimed? Expert-wave: once every L1
  // tile of its wave is claimed; share: every L1 tile of its expert, plus `lag`.
  template <class Tiles>
  XSTAGE_HD bool allowed(int t2, int t1, Tiles& tiles) const {
    if (t1 >= total1) return true;
    const ExpertSpan e = tiles.l1_span_of_l2(t2);
    if (order == ClaimOrder::expert_wave) return wave(e.first) < wave(tiles.l1_first(t1));
    return t1 >= e.end + lag;
  }

 private:
  XSTAGE_HD int wave(int first_l1) const { return first_l1 / wave_tiles; }
  // Share: L2's claimed work at most its share of the work claimed since the spread started.
  XSTAGE_HD bool within_share(int t1, int t2) const {
    if (order == ClaimOrder::expert_wave) return true;
    const float w1 = float(t1 - t1_start > 0 ? t1 - t1_start : 0) * k1, w2 = float(t2) * k2;
    return w2 <= share * (w1 + w2);
  }
};

}  // namespace xstage::sched
