#pragma once
// Timing on a World the nccl-tests way: warm-up, one event pair per
// iteration on the lead stream around fork / body / join, the median, the
// largest over ranks. Internal to src/runtime.
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "harness/core/paired_schedule.hpp"
#include "xstage/comm/world.hpp"
#include "xstage/core/device.hpp"

namespace xstage {

// Times `body` (enqueued between fork and join) on the lead stream: warm-up,
// then one event pair per iteration; the median, the largest over ranks.
template <class Body>
inline double median_us(World& w, int warmup, int iters, Body&& body) {
  const int lead = w.device_of(w.local_ranks().front());  // the events' GPU (timed_runs_us)
  XSTAGE_CUDA(cudaSetDevice(lead));
  std::vector<cudaEvent_t> ev(2 * iters);
  for (auto& e : ev) XSTAGE_CUDA(cudaEventCreate(&e));
  auto once = [&] {
    w.fork();
    body();
    w.join();
    XSTAGE_CUDA(cudaSetDevice(lead));
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

// Runs bodies[order[0]], bodies[order[1]], ... back to back on the lead
// stream, one event pair per run, after `warmup` runs of every body. Returns
// each run's time in microseconds, the largest over ranks.
inline std::vector<double> timed_runs_us(World& w, int warmup, const std::vector<std::function<void()>>& bodies,
                                         const std::vector<size_t>& order) {
  // The events belong to the lead stream's GPU: created there, and that GPU
  // made current again before each record, since a body switches GPUs
  // (one launch a local rank; an event made on another GPU than its
  // stream's is an invalid resource handle).
  const int lead = w.device_of(w.local_ranks().front());
  XSTAGE_CUDA(cudaSetDevice(lead));
  std::vector<cudaEvent_t> ev(2 * order.size());
  for (auto& e : ev) XSTAGE_CUDA(cudaEventCreate(&e));
  auto once = [&](size_t b) {
    w.fork();
    bodies[b]();
    w.join();
    XSTAGE_CUDA(cudaSetDevice(lead));
  };
  for (int i = 0; i < warmup; ++i)
    for (size_t b = 0; b < bodies.size(); ++b) once(b);
  w.barrier();
  XSTAGE_CUDA(cudaSetDevice(lead));
  for (size_t i = 0; i < order.size(); ++i) {
    XSTAGE_CUDA(cudaEventRecord(ev[2 * i], w.lead_stream()));
    once(order[i]);
    XSTAGE_CUDA(cudaEventRecord(ev[2 * i + 1], w.lead_stream()));
  }
  w.barrier();
  std::vector<double> t(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    float ms = 0;
    XSTAGE_CUDA(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    t[i] = w.max_over_ranks(ms * 1e3);
  }
  for (auto& e : ev) (void)cudaEventDestroy(e);
  return t;
}

// Every run of a timed schedule: per body, its times in the order they ran
// (`t`) and, in paired timing, the base run just before each (`before`;
// else empty); and every run in the order it ran (`order`, `flat`).
struct PairedTimes {
  std::vector<std::vector<double>> t, before;
  std::vector<size_t> order;
  std::vector<double> flat;
};

// Splits the runs of `order` (times `flat`) by body; with `base` < n, the
// run before each run of another body is its pair's base run.
inline PairedTimes split_runs(size_t n, size_t base, std::vector<size_t> order, std::vector<double> flat) {
  PairedTimes out{std::vector<std::vector<double>>(n), std::vector<std::vector<double>>(n), std::move(order),
                  std::move(flat)};
  for (size_t i = 0; i < out.order.size(); ++i) {
    out.t[out.order[i]].push_back(out.flat[i]);
    if (base < n && out.order[i] != base) out.before[out.order[i]].push_back(out.flat[i - 1]);  // base came first
  }
  return out;
}

// Times several bodies interleaved: `rounds` rounds, each running every body
// once (round r starts at body r mod n), back to back on the lead stream, one
// event pair per run. Slow drifts of the GPU (clock and power settling under
// a long load) then reach every body alike instead of the ones timed last.
// Times in microseconds, each the largest over ranks; no pairs.
inline PairedTimes interleaved_us(World& w, int warmup, int rounds, const std::vector<std::function<void()>>& bodies) {
  const size_t n = bodies.size();
  std::vector<size_t> order;
  for (int r = 0; r < rounds; ++r)
    for (size_t k = 0; k < n; ++k) order.push_back((k + size_t(r)) % n);
  std::vector<double> flat = timed_runs_us(w, warmup, bodies, order);
  return split_runs(n, n, std::move(order), std::move(flat));
}

// Times every body right after a run of body `base` (attention-only): each
// round runs, for every other body b (round r starts r bodies further along),
// base then b, back to back on the lead stream, one event pair per run. A pair
// shares the GPU's clock and power state, so b / base - 1 of a pair is free of
// the drift that interleaving alone leaves between two runs of one round:
// under the H200's power cap the SM clock moves by several percent within a
// second (docs/perf-log.md, f7, f10). settled: one more run of base before
// each pair (paired_schedule). Returns, per body, its times by round (`t`;
// for base, every run of it) and, for the others, the base run just before
// each (`before`): PairedTimes.
inline PairedTimes paired_after_base_us(World& w, int warmup, int rounds, size_t base,
                                        const std::vector<std::function<void()>>& bodies, bool settled = false) {
  std::vector<size_t> order = paired_schedule(bodies.size(), base, rounds, settled);
  std::vector<double> flat = timed_runs_us(w, warmup, bodies, order);
  return split_runs(bodies.size(), base, std::move(order), std::move(flat));
}

}  // namespace xstage
