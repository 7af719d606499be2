#pragma once
// One launch of sm90_grouped_gemm<Cfg, Epilogue, GroupedTileScheduler>:
// builds the TMA maps of A and B, sizes the persistent grid (one CTA per SM,
// never more than the work items there can be: tiles times splits), sets the shared-memory limit and
// launches on `stream` (the tail split's grid is the same: it splits the
// last wave over the CTAs there are). Returns a cudaError_t as int (cudaErrorInvalidValue
// also when the driver rejects a tensor map).
#include <cuda_runtime.h>

#include "device/gemm/epilogue_values.cuh"
#include "device/gemm/smem_opt_in.cuh"
#include "device/gemm/tensor_maps.cuh"
#include "device/moe/gemm_tiles.cuh"
#include "device/moe/grouped_gemm_sm90.cuh"
#include "device/sched/grouped.cuh"

namespace xstage::moe {

template <class Cfg, class Epilogue>
int launch_grouped_gemm(const GroupedGemmParams& p, cudaStream_t stream) {
  using Sched = sched::GroupedTileScheduler;
  if (p.rows_total == 0) return 0;  // nothing to compute; a TMA map of 0 rows is invalid
  GroupedTmaMaps tm{};
  using Elem = typename Cfg::Elem;
  int rc = gemm::encode_rows_k<Elem>(&tm.a, p.a, p.K, p.rows_total, Cfg::BLOCK_M);
  if (rc == 0) rc = gemm::encode_rows_k<Elem>(&tm.b, p.b, p.K, int64_t(p.E) * p.N, Cfg::BLOCK_N);
  // C (bf16) as 2-D (output columns, rows_total), boxes of 64 x 16: one consumer warp's rows.
  if (rc == 0 && Cfg::WARP_TMA)
    rc = gemm::encode_rows_k<gemm::Bf16>(&tm.c, p.c, p.N / Epilogue::kOutDiv, p.rows_total, 16);
  if (rc != 0) return rc;
  // The last n-block of an N that is no multiple of BLOCK_N is partial: its
  // columns past N are computed and not stored (grouped_gemm_sm90.cuh).
  const int n_blocks = (p.N + Cfg::BLOCK_N - 1) / Cfg::BLOCK_N;
  Sched::Params sp{p.offs, p.E, p.rows_total, n_blocks, p.splits, p.tail_splits};
  // Split-K (uniform or the tail's) and the plain kernel are separate instantiations (grouped_gemm_sm90.cuh
  // says why); ping-pong tiles have no split-K one.
  const bool split = p.splits > 1 || p.tail_splits > 1;
  if (p.splits > 1 && p.tail_splits > 1) return int(cudaErrorInvalidValue);
  auto* fn = sm90_grouped_gemm<Cfg, Epilogue, Sched, false>;
  if constexpr (!Cfg::PINGPONG) {
    if (split) fn = sm90_grouped_gemm<Cfg, Epilogue, Sched, true>;
  } else if (split) {
    return int(cudaErrorInvalidValue);
  }
  int device = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return int(e);
  static uint64_t opted_in[2] = {0, 0};  // per instantiation, a bit per device
  rc = gemm::opt_in_shared_memory(fn, Cfg::SMEM_BYTES, device, opted_in[split]);
  if (rc != 0) return rc;
  const int64_t grid =
      Sched::grid_size(Sched::max_tiles(p.rows_total, p.E, Cfg::BLOCK_M, sp.n_blocks) * p.splits, sms, 1);
  fn<<<dim3(unsigned(grid)), dim3(Cfg::THREADS), Cfg::SMEM_BYTES, stream>>>(p, sp, tm);
  return int(cudaGetLastError());
}

// Shape<0> stores from warp-private staging rows, Shape<columns> stages the
// whole tile and sends it as bulk copies, Shape<0, true> sends each warp's
// boxes as TMA tensor stores (gemm/tile_config.cuh).
template <template <int, bool> class Shape, class Epilogue>
int launch_with_out_store(const GroupedGemmParams& p, int out_store, cudaStream_t stream) {
  using Staged = Shape<0, false>;
  using Bulk = Shape<Staged::BLOCK_N / Epilogue::kOutDiv, false>;
  using Tma = Shape<0, true>;
  switch (out_store) {
    case kOutWarpStaged: return launch_grouped_gemm<Staged, Epilogue>(p, stream);
    case kOutTileBulk: return launch_grouped_gemm<Bulk, Epilogue>(p, stream);
    case kOutWarpTma: return launch_grouped_gemm<Tma, Epilogue>(p, stream);
    default: return int(cudaErrorInvalidValue);
  }
}

template <class Epilogue>
int launch_grouped_gemm_tile(const GroupedGemmParams& p, int tile, int out_store, cudaStream_t stream) {
  switch (tile) {
    case kTileM128N256: return launch_with_out_store<CfgM128N256, Epilogue>(p, out_store, stream);
    case kTileM64N256: return launch_with_out_store<CfgM64N256, Epilogue>(p, out_store, stream);
    case kTileM128N128: return launch_with_out_store<CfgM128N128, Epilogue>(p, out_store, stream);
    case kTileM64N80:
      // Built for the plain epilogue and the staged store only: 40 columns a
      // warpgroup split SwiGLU's 16-column gate/up groups, and are no whole
      // 64-column box (tma) or 16-mod-128-byte staged row (bulk). The runtime
      // refuses the other combinations before they get here (moe_gemm.cpp).
      if constexpr (Epilogue::kOutDiv == 1)
        if (out_store == kOutWarpStaged) return launch_grouped_gemm<CfgM64N80<0, false>, Epilogue>(p, stream);
      return int(cudaErrorInvalidValue);
    case kTileM128N128Pingpong:
      // Built with the staged store only (tile_config.cuh: the warpgroups'
      // own tiles end at different times; the runtime refuses the others).
      if (out_store == kOutWarpStaged) return launch_grouped_gemm<CfgM128N128Pingpong<0, false>, Epilogue>(p, stream);
      return int(cudaErrorInvalidValue);
    default: return int(cudaErrorInvalidValue);
  }
}

}  // namespace xstage::moe
