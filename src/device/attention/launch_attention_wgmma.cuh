#pragma once
// One launch of sm90_bf16_attention_fwd_wgmma<D, Epilogue, Scheduler, SCHEDULE, BLOCK_N, CWGS>:
// builds the TMA tensor maps of Q, K and V ([B, S, H, D] with the element
// strides of MainloopParams, seen by the TMA unit as 4-D (D, S, H, B) boxes of
// 64 x rows), sets the shared-memory limit and launches on `stream`. Same
// template parameters as launch_attention_kernel (launch_attention.cuh), so an
// epilogue written for the mma.sync kernel launches this one unchanged. Returns a
// cudaError_t as int (cudaErrorInvalidValue also when the driver rejects a
// tensor map, cudaErrorNotSupported when it has no cuTensorMapEncodeTiled).
#include <cuda_runtime.h>

#include "device/attention/launch_grid.cuh"
#include "device/attention/sm90_attention_fwd_wgmma.cuh"
#include "device/ptx/tma.cuh"

namespace xstage::attention {

namespace wgmma_detail {
inline int encode_bshd(CUtensorMap* map, const void* base, int D, int S, int H, int B, int64_t stride_s,
                       int64_t stride_h, int64_t stride_b, int box_rows) {
  const uint64_t dims[4] = {uint64_t(D), uint64_t(S), uint64_t(H), uint64_t(B)};
  const uint64_t strides[3] = {uint64_t(stride_s) * 2, uint64_t(stride_h) * 2, uint64_t(stride_b) * 2};
  const uint32_t box[4] = {64, uint32_t(box_rows), 1, 1};
  return ptx::encode_tensor_map_sw128(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, base, 4, dims, strides, box);
}
}  // namespace wgmma_detail

template <int D, int BLOCK_N = kWgmmaDefaultBlockN<D>, int CWGS = 2>
int make_attention_tma_maps(const MainloopParams& p, AttnTmaMaps* tm) {
  using Cfg = Sm90WgmmaAttnConfig<D, BLOCK_N, CWGS>;
  int e = wgmma_detail::encode_bshd(&tm->q, p.q, D, p.S_q, p.H, p.B, p.q_stride_s, p.q_stride_h, p.q_stride_b,
                                    Cfg::BLOCK_M);
  if (e == 0)
    e = wgmma_detail::encode_bshd(&tm->k, p.k, D, p.S_kv, p.H, p.B, p.k_stride_s, p.k_stride_h, p.k_stride_b,
                                  Cfg::BLOCK_N);
  if (e == 0)
    e = wgmma_detail::encode_bshd(&tm->v, p.v, D, p.S_kv, p.H, p.B, p.v_stride_s, p.v_stride_h, p.v_stride_b,
                                  Cfg::BLOCK_N);
  return e;
}

template <int D, class Epilogue, class Scheduler, int SCHEDULE = kWgmmaPingpong, int BLOCK_N = kWgmmaDefaultBlockN<D>,
          int CWGS = 2>
int launch_attention_wgmma_kernel(const MainloopParams& p, const typename Epilogue::Params& ep,
                                  const typename Scheduler::Params& sp, cudaStream_t stream) {
  using Cfg = Sm90WgmmaAttnConfig<D, BLOCK_N, CWGS>;
  AttnTmaMaps tm;
  int rc = make_attention_tma_maps<D, BLOCK_N, CWGS>(p, &tm);
  if (rc != 0) return rc;
  auto* fn = sm90_bf16_attention_fwd_wgmma<D, Epilogue, Scheduler, SCHEDULE, BLOCK_N, CWGS>;
  unsigned grid = 0;
  rc = attention_grid<Scheduler>(fn, Cfg::SMEM_BYTES, p, sp, Cfg::BLOCK_M, Cfg::MIN_BLOCKS, &grid);
  if (rc != 0) return rc;
  fn<<<dim3(grid), dim3(Cfg::THREADS), Cfg::SMEM_BYTES, stream>>>(p, ep, sp, tm);
  return int(cudaGetLastError());
}

// CTAs of one instantiation resident on an SM (occupancy API, with its
// shared memory allowed first; 0 on a CUDA error).
template <int D, class Epilogue, class Scheduler, int SCHEDULE = kWgmmaPingpong, int BLOCK_N = kWgmmaDefaultBlockN<D>,
          int CWGS = 2>
int attention_wgmma_ctas_per_sm() {
  using Cfg = Sm90WgmmaAttnConfig<D, BLOCK_N, CWGS>;
  auto* fn = sm90_bf16_attention_fwd_wgmma<D, Epilogue, Scheduler, SCHEDULE, BLOCK_N, CWGS>;
  if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Cfg::SMEM_BYTES)) != cudaSuccess)
    return 0;
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, Cfg::THREADS, Cfg::SMEM_BYTES) != cudaSuccess) return 0;
  return n;
}

}  // namespace xstage::attention
