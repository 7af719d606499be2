#pragma once
// The host's MoE choices (include/xstage/moe.hpp, moe_layer.hpp) as the device
// launches number them (device/moe/moe_params.hpp, fused_layer_params.hpp).
// The host enums carry the device's values; these asserts keep the two in
// step at compile time, so that every conversion below is a cast.
#include "device/moe/fused_layer_params.hpp"
#include "device/moe/moe_params.hpp"
#include "xstage/moe/moe.hpp"
#include "xstage/moe/moe_layer.hpp"

namespace xstage {

static_assert(int(MoeTile::m128n256) == moe::kTileM128N256 && int(MoeTile::m64n256) == moe::kTileM64N256 &&
                  int(MoeTile::m128n128) == moe::kTileM128N128 && int(MoeTile::m64n80) == moe::kTileM64N80 &&
                  int(MoeTile::m128n128pp) == moe::kTileM128N128Pingpong &&
                  moe::kTileCount == int(MoeTile::m128n128pp) + 1,
              "MoeTile and moe::TileId number the compiled tiles alike");
static_assert(int(MoeOutStore::warp_staged) == moe::kOutWarpStaged &&
                  int(MoeOutStore::tile_bulk) == moe::kOutTileBulk && int(MoeOutStore::warp_tma) == moe::kOutWarpTma,
              "MoeOutStore and moe::OutStoreId number the output stores alike");
static_assert(int(moe::kFusedM128N256) == moe::kTileM128N256 && int(moe::kFusedM64N256) == moe::kTileM64N256,
              "the fused kernel's tiles keep the grouped GEMM's numbers");
static_assert(int(MoeSchedule::expert_wave) == moe::kScheduleExpertWave &&
                  int(MoeSchedule::interleaved) == moe::kScheduleShare,
              "the fused kernel numbers expert-wave and the interleaved share order as MoeSchedule does");

// A resolved tile or store (not automatic).
inline moe::TileId tile_id(MoeTile t) { return moe::TileId(int(t)); }
inline moe::OutStoreId out_store_id(MoeOutStore s) { return moe::OutStoreId(int(s)); }

// The fused kernel's tile of a layer tile: m64n256, else m128n256.
inline moe::FusedTile fused_tile_id(MoeTile t) {
  return moe::FusedTile(int(t == MoeTile::m64n256 ? t : MoeTile::m128n256));
}

// The order a plan's schedule runs as (model-guided: the one it chose):
// expert-wave, else the share order.
inline moe::FusedSchedule fused_schedule(const MoeSchedulePlan& plan) {
  const MoeSchedule order = plan.schedule == MoeSchedule::model_guided ? plan.runs_as : plan.schedule;
  return order == MoeSchedule::expert_wave ? moe::kScheduleExpertWave : moe::kScheduleShare;
}

}  // namespace xstage
