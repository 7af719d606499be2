#include "runtime/moe/moe_layer_timing.hpp"

#include <cuda_runtime.h>

#include "device/probe/probe_launch.hpp"
#include "runtime/core/device_buffer.hpp"
#include "xstage/device.hpp"

namespace xstage {

void run_moe_once(World& w, MoeLayer& layer, MoeLayerVariant v, const MoeSchedulePlan& plan) {
  w.fork();
  layer.run(v, plan);
  w.join();
}

MoeRounds time_moe_rounds(World& w, MoeLayer& layer,
                          const std::vector<std::pair<MoeLayerVariant, MoeSchedulePlan>>& bodies, int warmup,
                          int rounds) {
  const size_t n = bodies.size();
  // Events and the clock reading belong to the lead stream's GPU (a body switches GPUs).
  const int lead = w.device_of(w.local_ranks().front());
  XSTAGE_CUDA(cudaSetDevice(lead));
  const size_t runs = n * size_t(rounds);
  std::vector<cudaEvent_t> ev(4 * runs);
  for (auto& e : ev) XSTAGE_CUDA(cudaEventCreate(&e));
  DeviceBuffer<unsigned long long> clock(2 * size_t(rounds));
  auto record = [&](cudaEvent_t e) {
    XSTAGE_CUDA(cudaSetDevice(lead));
    XSTAGE_CUDA(cudaEventRecord(e, w.lead_stream()));
  };
  auto phases = [&](size_t b, cudaEvent_t* e) {
    const auto& [v, plan] = bodies[b];
    if (e) record(e[0]);
    w.fork();
    layer.run_dispatch();
    w.join();
    if (e) record(e[1]);
    w.fork();
    layer.run_experts(v, plan);
    w.join();
    if (e) record(e[2]);
    w.fork();
    layer.run_combine(v);
    w.join();
    if (e) record(e[3]);
  };
  for (int i = 0; i < warmup; ++i)
    for (size_t b = 0; b < n; ++b) phases(b, nullptr);
  w.barrier();
  size_t run = 0;
  std::vector<size_t> order;
  for (int r = 0; r < rounds; ++r) {
    for (size_t k = 0; k < n; ++k, ++run) {
      order.push_back((k + size_t(r)) % n);
      phases(order.back(), &ev[4 * run]);
    }
    XSTAGE_CUDA(cudaSetDevice(lead));
    XSTAGE_CUDA(probe::launch_calibrate(200'000, reinterpret_cast<uint64_t*>(clock.ptr) + 2 * r, w.lead_stream()));
  }
  w.barrier();
  layer.check_waits();
  XSTAGE_CUDA(cudaSetDevice(lead));
  std::vector<unsigned long long> c(2 * size_t(rounds));
  XSTAGE_CUDA(cudaMemcpy(c.data(), clock.ptr, c.size() * sizeof(c[0]), cudaMemcpyDeviceToHost));
  MoeRounds out;
  out.ms.assign(n, {});
  out.phase_ms.assign(n, {});
  for (size_t i = 0; i < runs; ++i) {
    float t[4] = {0, 0, 0, 0};
    XSTAGE_CUDA(cudaEventElapsedTime(&t[0], ev[4 * i], ev[4 * i + 3]));
    for (int p = 0; p < 3; ++p) XSTAGE_CUDA(cudaEventElapsedTime(&t[p + 1], ev[4 * i + p], ev[4 * i + p + 1]));
    out.ms[order[i]].push_back(w.max_over_ranks(t[0]));
    for (int p = 0; p < 3; ++p) out.phase_ms[order[i]][p].push_back(w.max_over_ranks(t[p + 1]));
  }
  for (int r = 0; r < rounds; ++r)
    out.sm_clock_mhz.push_back(c[2 * r] ? 1e3 * double(c[2 * r + 1]) / double(c[2 * r]) : 0.0);
  for (auto& e : ev) (void)cudaEventDestroy(e);
  return out;
}

}  // namespace xstage
