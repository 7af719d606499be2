// The model-guided plan of the fused MoE layer: candidate plans the kernel can
// run, simulated, the fastest predicted kept (include/xstage/moe/moe_prediction.hpp,
// docs/model.md section 9).
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "util/parallel_for.hpp"
#include "xstage/core/error.hpp"
#include "xstage/moe/moe_prediction.hpp"

namespace xstage {

namespace {

MoeSchedulePlan share_plan(double share, int lag) {
  MoeSchedulePlan p;
  p.schedule = MoeSchedule::interleaved;
  p.l2_share = share;
  p.lag_tiles = lag;
  return p;
}

}  // namespace

std::vector<MoePlanCandidate> moe_plan_candidates(const MoeLaunch& l, const Profile& p) {
  const int G = l.sms;
  std::vector<MoePlanCandidate> out;
  out.push_back({share_plan(0, G), "the even spread, lag G (the interleaved default)", 0});
  // Not offered as simulated candidates (results/h200/moe-sweep, docs/design/moe-model.md):
  // expert-wave, which the model chose on 8 host configurations (Mixtral at
  // >= 2K tokens) where it measured 4-11% slower than the even spread (the
  // model does not see the stage go cold again after a long L1 phase), and
  // lag G/2, chosen on 24 and more than 2% slower than the better schedule on 12.
  // Expert-wave comes back only where the stage is free (moe_plan_for_launch).
  const double rho = moe_rho(l, p);
  if (rho > 1 && 1 / rho < moe_default_l2_share(l, G))
    out.push_back({share_plan(1 / rho, G), "L2's share capped at 1/rho: stores at the drain rate", 0});
  // How long the default's L2 tiles wait for their L1 tiles says whether a
  // larger lag can help.
  double idle = 0;
  auto run = [&](size_t begin) {
    parallel_for(out.size() - begin, [&](size_t i) {
      MoePlanCandidate& c = out[begin + i];
      const MoeClaimSchedule cs = moe_claim_schedule(l, c.plan, p, false);
      c.experts_ns = cs.drained_ns + (cs.store_bytes > 0 ? 2 * p.latency_ns : 0.0);
      if (begin + i == 0 && cs.makespan_ns > 0) idle = cs.idle_ns / (double(G) * cs.makespan_ns);
    });
  };
  run(0);
  if (idle > kMoePlanIdle) {
    const size_t more = out.size();
    out.push_back({share_plan(0, 2 * G), "the even spread, lag 2 G: L2 tiles wait less for their L1 tiles", 0});
    out.push_back({share_plan(0, 4 * G), "the even spread, lag 4 G: L2 tiles wait less for their L1 tiles", 0});
    run(more);
  }
  return out;
}

MoeSchedulePlan moe_plan_for_launch(const MoeLaunch& l, const Profile& p) {
  // A free stage leaves only compute order to choose (moe_prediction.hpp):
  // there the model's lag gains are ones of idle SMs, and the waves measured
  // better where experts are short. No candidate needs simulating then.
  const double l1_tiles = moe_mean_l1_tiles(l);
  if (l1_tiles > 0 && l1_tiles <= kMoeWaveExpertTiles * l.sms && moe_rho(l, p) <= 1) {
    MoeSchedulePlan wave;
    wave.schedule = MoeSchedule::expert_wave;
    return wave;
  }
  const std::vector<MoePlanCandidate> cs = moe_plan_candidates(l, p);
  const MoePlanCandidate* best = &cs.front();
  for (const MoePlanCandidate& c : cs)
    if (c.experts_ns < best->experts_ns) best = &c;
  // Ties (and what the model cannot tell apart) go to the interleaved default.
  if (best->experts_ns >= (1 - kMoePlanTie) * cs.front().experts_ns) best = &cs.front();
  return best->plan;
}

double moe_mean_l1_tiles(const MoeLaunch& l) {
  if (l.block_m < 1 || l.block_n < 1 || l.inter < 1)
    throw Error(fmt::format("moe launch: expected positive tile and inter, got {}x{} and {}", l.block_m, l.block_n,
                            l.inter));
  const long n_blocks = (2L * l.inter + l.block_n - 1) / l.block_n;
  long tiles = 0, experts = 0;
  for (int rows : l.expert_rows)
    if (rows > 0) {
      tiles += (rows + l.block_m - 1) / l.block_m * n_blocks;
      ++experts;
    }
  return experts > 0 ? double(tiles) / double(experts) : 0.0;
}

MoeSchedulePlan moe_plan_for_config(const MoeConfig& c, const Profile& profile) {
  MoeConfig u = c;
  u.rows_per_rank.clear();
  u.routing = "uniform";
  u.plans.clear();
  return moe_plan_for_launch(moe_config_launches(u).front(), profile);
}

MoeSchedulePlan moe_plan_schedule(const MoeShape& shape, int tokens, int P, int sms, MoeTile tile,
                                  const Profile& profile) {
  MoeConfig c;
  c.shape = shape;
  c.tokens = tokens;
  c.P = P;
  c.sms = sms;
  c.tile = tile;
  c.backend = profile.transport == "host" || profile.transport == "local" ? "emulated" : "peer";
  c.placement = profile.transport == "local" ? "device" : "host";
  return moe_plan_for_config(c, profile);
}

}  // namespace xstage
