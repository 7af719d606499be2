// The unfused baseline's permute: L2's output rows, in pool order (receiver,
// e_loc, source, i), are moved into send order (receiver, source, e_loc, i),
// so that each source's rows are one contiguous chunk for the copy engine or
// NCCL, as a user of torch's all-to-all lays them out. row_perm comes from
// the pull kernel's plan.
#include "device/moe/layer_comm_launch.hpp"
#include "device/moe/layer_device.cuh"

namespace xstage::moe {

namespace {

constexpr int kPermuteThreads = 256;

__global__ void __launch_bounds__(kPermuteThreads) sm90_moe_permute(PermuteParams p) {
  const int64_t end = p.offs[p.E_run - 1];
  const int64_t rows = end < p.rows ? end : p.rows;
  const int lane = int(threadIdx.x) & 31;
  const int64_t warps = int64_t(gridDim.x) * (kPermuteThreads / 32);
  for (int64_t g = int64_t(blockIdx.x) * (kPermuteThreads / 32) + (int(threadIdx.x) >> 5); g < rows; g += warps) {
    const int64_t to = p.row_perm[g];
    if (to < 0 || to >= p.rows) continue;
    warp_copy_row(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.src) + g * p.H),
                  reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.dst) + to * p.H), p.H / 8, lane);
  }
}

}  // namespace

int preload_moe_permute() {
  cudaFuncAttributes a;
  return int(cudaFuncGetAttributes(&a, sm90_moe_permute));
}

int launch_moe_permute(const PermuteParams& p, int grid, cudaStream_t stream) {
  sm90_moe_permute<<<unsigned(grid), kPermuteThreads, 0, stream>>>(p);
  return int(cudaGetLastError());
}

}  // namespace xstage::moe
