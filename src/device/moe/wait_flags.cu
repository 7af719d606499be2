// The layer's flag waits as a kernel of one CTA ahead of the kernels that
// read what the flags vouch for (the pull's counts and routes, the fused
// combine's rows). Polled by every CTA of those kernels instead, a flag in
// host memory costs each CTA a PCIe round trip, one after another: the GPU
// serves uncached reads of one line in turn (perf-log, MoE layer L11). The
// stream order then carries the acquire to the kernels after it.
#include "device/moe/layer_comm_launch.hpp"
#include "device/moe/layer_device.cuh"

namespace xstage::moe {

namespace {

constexpr int kWaitThreads = 128;

__global__ void __launch_bounds__(kWaitThreads) sm90_moe_wait_flags(WaitFlagsParams p) {
  if (any_wait_failed(p.earlier_records, p.earlier_count)) return;
  wait_flags_geq(
      p.n * p.P,
      [&](int g, int& rank, int& index) {
        rank = p.rank0 + g / p.P, index = p.first + g % p.P;
        return static_cast<const uint64_t*>(p.flags[rank] + index);
      },
      run_epoch(p.epoch_at, p.epoch), p.timeout_ns, p.timeout_record);
}

}  // namespace

int preload_moe_wait_flags() {
  cudaFuncAttributes a;
  return int(cudaFuncGetAttributes(&a, sm90_moe_wait_flags));
}

int launch_moe_wait_flags(const WaitFlagsParams& p, cudaStream_t stream) {
  sm90_moe_wait_flags<<<1, kWaitThreads, 0, stream>>>(p);
  return int(cudaGetLastError());
}

int preload_moe_layer_comm_kernels() {
  for (int (*f)() : {preload_moe_route, preload_moe_wait_flags, preload_moe_pull, preload_moe_combine,
                     preload_moe_permute, preload_moe_run_begin})
    if (const int e = f(); e != 0) return e;
  return 0;
}

}  // namespace xstage::moe
