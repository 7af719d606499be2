#pragma once
// RAII owners of a device allocation and of a CUDA event, and event timing, for the benches.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "xstage/core/device.hpp"

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

// Median and fastest of `iters` runs of body() after `warmup`, one event pair each (ms).
template <class Body>
void time_event_runs(int warmup, int iters, Body&& body, double& median, double& fastest) {
  for (int i = 0; i < warmup; ++i) body();
  std::vector<CudaEvent> ev(2 * size_t(iters));
  for (int i = 0; i < iters; ++i) {
    XSTAGE_CUDA(cudaEventRecord(ev[2 * i].e));
    body();
    XSTAGE_CUDA(cudaEventRecord(ev[2 * i + 1].e));
  }
  XSTAGE_CUDA(cudaDeviceSynchronize());
  XSTAGE_CUDA(cudaGetLastError());
  std::vector<float> ms(iters);
  for (int i = 0; i < iters; ++i) XSTAGE_CUDA(cudaEventElapsedTime(&ms[i], ev[2 * i].e, ev[2 * i + 1].e));
  std::sort(ms.begin(), ms.end());
  median = iters % 2 ? ms[iters / 2] : 0.5 * (ms[iters / 2 - 1] + ms[iters / 2]);
  fastest = ms.front();
}

}  // namespace xstage
