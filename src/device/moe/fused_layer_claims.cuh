#pragma once
// The fused layer's claims (sched/layer_claims.cuh) as its parameter block
// sets them: sched/ knows nothing of the MoE parameters, the layer fills the
// scheduler's own.
#include "device/moe/fused_layer_params.hpp"
#include "device/sched/layer_claims.cuh"

namespace xstage::moe {

static_assert(int(kScheduleExpertWave) == int(sched::ClaimOrder::expert_wave) &&
                  int(kScheduleShare) == int(sched::ClaimOrder::share),
              "FusedSchedule numbers the claim orders as sched::ClaimOrder does");

// bn: the tiles' BLOCK_N (both GEMMs).
__device__ inline sched::LayerClaimsParams fused_claims_params(const FusedLayerParams& p, int bn) {
  sched::LayerClaimsParams c;
  c.offs = p.offs;
  c.counters = p.counters;
  c.E = p.E_run, c.rows_cap = p.rows_cap;
  // The last n-block of either GEMM may reach past N (its stores stop at N).
  c.n1 = (2 * p.inter + bn - 1) / bn, c.n2 = (p.hidden + bn - 1) / bn;
  c.k1 = p.hidden, c.k2 = p.inter;
  // Every schedule but expert-wave claims by share (the share rule); expert-wave claims by waves.
  c.policy.order = p.schedule == kScheduleExpertWave ? sched::ClaimOrder::expert_wave : sched::ClaimOrder::share;
  c.policy.wave_tiles = p.wave_tiles;
  c.policy.l2_share = p.l2_share;
  c.policy.lag_tiles = p.lag_tiles;
  return c;
}

}  // namespace xstage::moe
