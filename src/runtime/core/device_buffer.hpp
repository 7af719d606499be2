#pragma once
// RAII owners of a device allocation and of a CUDA event, for the benches.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "xstage/device.hpp"

namespace xstage {

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(size_t n) { XSTAGE_CUDA(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T))); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct CudaEvent {
  cudaEvent_t e = nullptr;
  CudaEvent() { XSTAGE_CUDA(cudaEventCreate(&e)); }
  ~CudaEvent() { cudaEventDestroy(e); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
};

}  // namespace xstage
