#include "harness/moe/moe_layer_timing.hpp"

#include <cuda_runtime.h>

#include <algorithm>

#include "device/probe/probe_launch.hpp"
#include "harness/core/paired_stats.hpp"
#include "runtime/core/device_buffer.hpp"
#include "xstage/core/device.hpp"

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
  // Events and the clock reading belong to the lead stream's GPU (a run switches GPUs).
  const int lead = w.device_of(w.local_ranks().front());
  XSTAGE_CUDA(cudaSetDevice(lead));
  CudaEvent e0, e1;
  DeviceBuffer<unsigned long long> clock(2);
  uint64_t* clock_ptr = reinterpret_cast<uint64_t*>(clock.ptr);
  for (int i = 0; i < warmup; ++i)
    for (const auto& [v, plan] : bodies) run_moe_once(w, layer, v, plan);
  w.barrier();
  MoeRounds out;
  out.ms.assign(n, {});
  out.phase_ms.assign(n, {});
  for (int r = 0; r < rounds; ++r) {
    std::vector<double> mhz;
    for (size_t k = 0; k < n; ++k) {
      const size_t b = (k + size_t(r)) % n;
      XSTAGE_CUDA(cudaSetDevice(lead));
      XSTAGE_CUDA(probe::launch_calibrate(100'000, clock_ptr, w.lead_stream()));
      XSTAGE_CUDA(cudaEventRecord(e0.e, w.lead_stream()));
      run_moe_once(w, layer, bodies[b].first, bodies[b].second);
      XSTAGE_CUDA(cudaSetDevice(lead));
      XSTAGE_CUDA(cudaEventRecord(e1.e, w.lead_stream()));
      XSTAGE_CUDA(cudaEventSynchronize(e1.e));
      float ms = 0;
      XSTAGE_CUDA(cudaEventElapsedTime(&ms, e0.e, e1.e));
      MoePhaseMs ph;
      for (int rank : w.local_ranks()) {
        const MoePhaseMs p = layer.phase_ms(rank);
        ph.dispatch = std::max(ph.dispatch, p.dispatch);
        ph.experts = std::max(ph.experts, p.experts);
        ph.combine = std::max(ph.combine, p.combine);
      }
      unsigned long long c[2] = {0, 0};
      XSTAGE_CUDA(cudaSetDevice(lead));
      XSTAGE_CUDA(cudaMemcpy(c, clock.ptr, sizeof c, cudaMemcpyDeviceToHost));
      if (c[0] > 0) mhz.push_back(1e3 * double(c[1]) / double(c[0]));
      out.ms[b].push_back(w.max_over_ranks(ms));
      out.phase_ms[b][0].push_back(w.max_over_ranks(ph.dispatch));
      out.phase_ms[b][1].push_back(w.max_over_ranks(ph.experts));
      out.phase_ms[b][2].push_back(w.max_over_ranks(ph.combine));
    }
    out.sm_clock_mhz.push_back(w.max_over_ranks(mhz.empty() ? 0.0 : median_value(mhz)));
  }
  w.barrier();
  layer.check_waits();
  return out;
}

}  // namespace xstage
