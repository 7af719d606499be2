#include "device/remote/local_memory.hpp"

#include <cstdint>

namespace xstage::remote {

namespace {

// The volatile array keeps its kReservedLocalBytes in local memory: the
// kernel's frame is at least that large.
__global__ void reserve_local_memory_kernel(int* sink) {
  volatile uint8_t frame[kReservedLocalBytes];
  for (size_t i = 0; i < kReservedLocalBytes; ++i) frame[i] = static_cast<uint8_t>(i + threadIdx.x);
  if (sink != nullptr) *sink = frame[threadIdx.x % kReservedLocalBytes];
}

}  // namespace

int reserve_local_memory() {
  reserve_local_memory_kernel<<<1, 32>>>(nullptr);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return int(e);
  return int(cudaDeviceSynchronize());
}

int check_local_frame(const void* fn) {
  cudaFuncAttributes a;
  if (const cudaError_t e = cudaFuncGetAttributes(&a, fn); e != cudaSuccess) return int(e);
  return a.localSizeBytes <= kReservedLocalBytes ? 0 : int(cudaErrorInvalidDeviceFunction);
}

}  // namespace xstage::remote
