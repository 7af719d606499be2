#include "device/probe/probe_kernels.cuh"
#include "device/probe/probe_launch.hpp"

namespace xstage::probe {

namespace {
using KernelFn = void (*)(KernelParams);

template <StoreKind S>
KernelFn pick_gap(GapKind g) {
  switch (g) {
    case GapKind::spin: return sm90_probe_bursts<S, GapKind::spin>;
    case GapKind::fma: return sm90_probe_bursts<S, GapKind::fma>;
    case GapKind::mma: return sm90_probe_bursts<S, GapKind::mma>;
  }
  return nullptr;
}

KernelFn pick_kernel(StoreKind s, GapKind g) {
  switch (s) {
    case StoreKind::v4: return pick_gap<StoreKind::v4>(g);
    case StoreKind::b64: return pick_gap<StoreKind::b64>(g);
    case StoreKind::b32: return pick_gap<StoreKind::b32>(g);
    case StoreKind::bulk: return pick_gap<StoreKind::bulk>(g);
  }
  return nullptr;
}
}  // namespace

int launch_bursts(const KernelParams& p, StoreKind s, GapKind g, int blocks, int threads, cudaStream_t stream) {
  const KernelFn fn = pick_kernel(s, g);
  const size_t smem = sizeof(BurstRecord) * p.bursts;
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return static_cast<int>(e);
  }
  fn<<<blocks, threads, smem, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

int launch_verify(const uint32_t* dst, uint64_t slot_bytes, uint32_t slots_written, uint32_t slots, uint32_t bursts,
                  uint32_t chunk_bytes, unsigned long long* mismatches, cudaStream_t stream) {
  verify_destination<<<264, 256, 0, stream>>>(dst, slot_bytes, slots_written, slots, bursts, chunk_bytes, mismatches);
  return static_cast<int>(cudaGetLastError());
}

int max_resident_blocks(StoreKind s, GapKind g, int threads, size_t dynamic_smem, int* blocks_per_sm) {
  const KernelFn fn = pick_kernel(s, g);
  if (dynamic_smem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dynamic_smem));
    if (e != cudaSuccess) return static_cast<int>(e);
  }
  return static_cast<int>(cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, fn, threads, dynamic_smem));
}

int launch_calibrate(uint64_t ns, uint64_t* out, cudaStream_t stream) {
  calibrate_clock<<<1, 1, 0, stream>>>(ns, out);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace xstage::probe
