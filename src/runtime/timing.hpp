#pragma once
// Timing on a World the nccl-tests way: warm-up, one event pair per
// iteration on the lead stream around fork / body / join, the median, the
// largest over ranks. Internal to src/runtime.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "xstage/device.hpp"
#include "xstage/world.hpp"

namespace xstage {

// Times `body` (enqueued between fork and join) on the lead stream: warm-up,
// then one event pair per iteration; the median, the largest over ranks.
template <class Body>
inline double median_us(World& w, int warmup, int iters, Body&& body) {
  XSTAGE_CUDA(cudaSetDevice(w.device_of(w.local_ranks().front())));
  std::vector<cudaEvent_t> ev(2 * iters);
  for (auto& e : ev) XSTAGE_CUDA(cudaEventCreate(&e));
  auto once = [&] {
    w.fork();
    body();
    w.join();
  };
  for (int i = 0; i < warmup; ++i) once();
  w.barrier();
  for (int i = 0; i < iters; ++i) {
    XSTAGE_CUDA(cudaEventRecord(ev[2 * i], w.lead_stream()));
    once();
    XSTAGE_CUDA(cudaEventRecord(ev[2 * i + 1], w.lead_stream()));
  }
  w.barrier();
  std::vector<double> t(iters);
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    XSTAGE_CUDA(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    t[i] = ms * 1e3;
  }
  for (auto& e : ev) (void)cudaEventDestroy(e);
  std::nth_element(t.begin(), t.begin() + iters / 2, t.end());
  return w.max_over_ranks(t[iters / 2]);
}

}  // namespace xstage
