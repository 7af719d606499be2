#pragma once
// One launch of sm90_bf16_attention_fwd<D, Epilogue, Scheduler>, shared by
// the launch files of every epilogue (local, Ulysses). Returns a cudaError_t
// as int; the host side turns it into an exception with context.
#include <cuda_runtime.h>

#include "device/attention/launch_grid.cuh"
#include "device/attention/sm90_attention_fwd.cuh"

namespace xstage::attention {

template <int D, class Epilogue, class Scheduler>
int launch_attention_kernel(const MainloopParams& p, const typename Epilogue::Params& ep,
                            const typename Scheduler::Params& sp, cudaStream_t stream) {
  using Cfg = Sm90AttnFwdConfig<D>;
  auto* fn = sm90_bf16_attention_fwd<D, Epilogue, Scheduler>;
  constexpr size_t smem = sm90_attention_fwd_smem_bytes<D, Epilogue>();
  static_assert(smem <= 227 * 1024, "attention kernel: shared memory beyond the 227 KiB of an sm_90 CTA");
  unsigned grid = 0;
  const int rc = attention_grid<Scheduler>(fn, smem, p, sp, Cfg::BLOCK_M, Cfg::MIN_BLOCKS, &grid);
  if (rc != 0) return rc;
  fn<<<dim3(grid), dim3(Cfg::THREADS), smem, stream>>>(p, ep, sp);
  return int(cudaGetLastError());
}

}  // namespace xstage::attention
