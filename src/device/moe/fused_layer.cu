// The fused MoE expert layer: one instantiation per tile shape (both GEMMs
// share it), its TMA maps and persistent grid.
#include "device/gemm/smem_opt_in.cuh"
#include "device/gemm/tensor_maps.cuh"
#include "device/moe/fused_layer_launch.hpp"
#include "device/moe/fused_layer_sm90.cuh"
#include "device/moe/gemm_tiles.cuh"

namespace xstage::moe {

namespace {

template <class Cfg, bool kTrace>
int launch_cfg(const FusedLayerParams& p, const FusedTrace& trace, cudaStream_t stream) {
  FusedTmaMaps tm;
  using gemm::encode_rows_k;
  using Elem = typename Cfg::Elem;
  int rc = encode_rows_k<Elem>(&tm.a1, p.x_pool, p.hidden, p.rows_cap, Cfg::BLOCK_M);
  if (rc == 0) rc = encode_rows_k<Elem>(&tm.b1, p.w13, p.hidden, int64_t(p.E_run) * 2 * p.inter, Cfg::BLOCK_N);
  if (rc == 0) rc = encode_rows_k<Elem>(&tm.a2, p.h, p.inter, p.rows_cap, Cfg::BLOCK_M);
  if (rc == 0) rc = encode_rows_k<Elem>(&tm.b2, p.w2, p.inter, int64_t(p.E_run) * p.hidden, Cfg::BLOCK_N);
  if (rc != 0) return rc;
  auto* fn = sm90_fused_moe_layer<Cfg, kTrace>;
  constexpr size_t smem = FusedSmem<Cfg>::BYTES;
  int device = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return int(e);
  static uint64_t opted_in = 0;  // a bit per device (and instantiation)
  rc = gemm::opt_in_shared_memory(fn, smem, device, opted_in);
  if (rc != 0) return rc;
  // At least one CTA, so that the done flags are published with no tile at all.
  const int64_t tiles = fused_layer_max_tiles(p.rows_cap, p.E_run, Cfg::BLOCK_M, 2 * p.inter) +
                        fused_layer_max_tiles(p.rows_cap, p.E_run, Cfg::BLOCK_M, p.hidden);
  const int64_t grid = tiles < sms ? (tiles < 1 ? 1 : tiles) : sms;
  fn<<<dim3(unsigned(grid)), dim3(Cfg::THREADS), smem, stream>>>(p, tm, trace);
  return int(cudaGetLastError());
}

template <class Cfg>
int launch_traced_or_not(const FusedLayerParams& p, const FusedTrace* trace, cudaStream_t stream) {
  return trace != nullptr && trace->buf != nullptr ? launch_cfg<Cfg, true>(p, *trace, stream)
                                                   : launch_cfg<Cfg, false>(p, FusedTrace{}, stream);
}

}  // namespace

// L2's rows leave by 16-byte stores from warp-staged rows (a bulk L2 store
// measured slower everywhere on host memory: perf-log, MoE layer L3).
int launch_fused_layer(const FusedLayerParams& p, int fused_tile, cudaStream_t stream, const FusedTrace* trace) {
  switch (fused_tile) {
    case kFusedM128N256: return launch_traced_or_not<CfgM128N256<>>(p, trace, stream);
    case kFusedM64N256: return launch_traced_or_not<CfgM64N256<>>(p, trace, stream);
    default: return int(cudaErrorInvalidValue);
  }
}

int preload_fused_layer(int fused_tile) {
  cudaFuncAttributes a;
  cudaError_t e = cudaErrorInvalidValue;
  switch (fused_tile) {
    case kFusedM128N256:
      e = cudaFuncGetAttributes(&a, sm90_fused_moe_layer<CfgM128N256<>, false>);
      if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, sm90_fused_moe_layer<CfgM128N256<>, true>);
      break;
    case kFusedM64N256:
      e = cudaFuncGetAttributes(&a, sm90_fused_moe_layer<CfgM64N256<>, false>);
      if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, sm90_fused_moe_layer<CfgM64N256<>, true>);
      break;
    default: break;
  }
  return int(e);
}

int fused_layer_block_m(int fused_tile) {
  switch (fused_tile) {
    case kFusedM128N256: return 128;
    case kFusedM64N256: return 64;
    default: return 0;
  }
}

}  // namespace xstage::moe
