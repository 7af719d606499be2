#pragma once
// The tile shapes the MoE expert GEMMs are compiled for (gemm/tile_config.cuh
// has what the parameters mean), named as moe_params.hpp's TileId names them.
#include "device/gemm/tile_config.cuh"

namespace xstage::moe {

template <int OUT_COLS = 0, bool WARP_TMA = false>
using CfgM128N256 = gemm::TileConfig<gemm::Bf16, 128, 256, 1, OUT_COLS, WARP_TMA>;
template <int OUT_COLS = 0, bool WARP_TMA = false>
using CfgM64N256 = gemm::TileConfig<gemm::Bf16, 64, 256, 2, OUT_COLS, WARP_TMA>;
template <int OUT_COLS = 0, bool WARP_TMA = false>
using CfgM128N128 = gemm::TileConfig<gemm::Bf16, 128, 128, 1, OUT_COLS, WARP_TMA>;
// Few long experts on a narrow N (HiDream-I1's L2: 2 experts, N = 2560,
// K = 6912): 64 x 80 tiles put about one tile on every SM with no split-K
// (128 tiles at 128 rows an expert), each warpgroup 64 x 40, and 11 stages of
// 18 KiB in flight for what is a weight stream. Plain epilogue and staged
// store only (launch_grouped_gemm.cuh).
template <int OUT_COLS = 0, bool WARP_TMA = false>
using CfgM64N80 = gemm::TileConfig<gemm::Bf16, 64, 80, 2, OUT_COLS, WARP_TMA, 12>;

// Short K (a few k-blocks a tile): 128 x 128 tiles, each consumer warpgroup
// on a tile of its own, so that one tile's epilogue runs while the next
// one's mainloop computes (gemm/tile_config.cuh, PINGPONG). Staged store
// only, no split-K (launch_grouped_gemm.cuh).
template <int OUT_COLS = 0, bool WARP_TMA = false>
using CfgM128N128Pingpong = gemm::TileConfig<gemm::Bf16, 128, 128, 1, OUT_COLS, WARP_TMA, 8, true>;

}  // namespace xstage::moe
