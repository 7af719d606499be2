// The first kernel of a caller-owned run (moe_layer_rank.hpp): the run's
// epoch and token count written from the stream. The host cannot write
// them: a CUDA graph replays a captured copy's source bytes and a kernel's
// parameters unchanged, so the epoch would repeat and the flags, which
// only grow, would pass every wait of the replays at once.
#include "device/moe/layer_comm_launch.hpp"

namespace xstage::moe {

namespace {

__global__ void sm90_moe_run_begin(RunBeginParams p) {
  *p.epoch += 1;
  *p.tokens = p.T;
}

}  // namespace

int preload_moe_run_begin() {
  cudaFuncAttributes a;
  return int(cudaFuncGetAttributes(&a, sm90_moe_run_begin));
}

int launch_moe_run_begin(const RunBeginParams& p, cudaStream_t stream) {
  sm90_moe_run_begin<<<1, 1, 0, stream>>>(p);
  return int(cudaGetLastError());
}

}  // namespace xstage::moe
