#pragma once
// One launch of sm90_bf16_attention_fwd<D, Epilogue, Scheduler>, shared by
// the launch files of every epilogue (local, Ulysses). Returns a cudaError_t
// as int; the host side turns it into an exception with context.
#include <cuda_runtime.h>

#include "device/attention/sm90_attention_fwd.cuh"

namespace xstage::attention {

template <int D, class Epilogue, class Scheduler>
int launch_attention_kernel(const MainloopParams& p, const typename Epilogue::Params& ep,
                            const typename Scheduler::Params& sp, cudaStream_t stream) {
  using Cfg = Sm90AttnFwdConfig<D>;
  auto* fn = sm90_bf16_attention_fwd<D, Epilogue, Scheduler>;
  constexpr size_t smem = sm90_attention_fwd_smem_bytes<D, Epilogue>();
  static_assert(smem <= 227 * 1024, "attention kernel: shared memory beyond the 227 KiB of an sm_90 CTA");
  // Every launch sets it (cheap); the first call per kernel is what matters.
  cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e != cudaSuccess) return int(e);
  int device = 0, sms = 0;
  e = cudaGetDevice(&device);
  if (e != cudaSuccess) return int(e);
  e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return int(e);
  const Scheduler sched(p, sp, Cfg::BLOCK_M);
  const int64_t grid = Scheduler::grid_size(sched.num_tiles(), sms, Cfg::MIN_BLOCKS);
  if (grid < 1 || grid > 0x7fffffff) return int(cudaErrorInvalidConfiguration);
  fn<<<dim3(unsigned(grid)), dim3(Cfg::THREADS), smem, stream>>>(p, ep, sp);
  return int(cudaGetLastError());
}

}  // namespace xstage::attention
