#pragma once
// Sweeps of `xstage probe`. The plan: which (K, warps, V, G, store, gap kind)
// points to measure, and which set each belongs to:
//   train       the default configuration, fitted
//   holdout     the default configuration at V and G the fit never sees
//   completion  long gaps with a completion measurement (fence or flag): latency
//   explore     one factor away from the default (warps, store kind, gap kind, K)
// The recording: every point measured, written as the probe CSV that
// `xstage fit` and `xstage validate` read back (xstage/probe/probe_fit.hpp).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "xstage/core/device.hpp"
#include "xstage/probe/probe.hpp"

namespace xstage {

struct PlannedPoint {
  ProbePoint point;
  std::string set;
};

std::vector<PlannedPoint> plan_sweep(const std::string& sweep, Transport t, int sm_count);

// What the library cannot know of a run: when it ran and the command as typed.
struct RunStamp {
  std::string date;  // UTC, ISO 8601
  std::string command;
};

struct ProbeRecording {
  // "# key: value" provenance lines (transport, device, driver, measured SM
  // clock, date, commit, command, copy engine rate, destination size), then
  // per point one row per statistic: max and mean (per-producer spans over
  // the steady bursts) and run (the run as a whole).
  std::string csv;
  std::string per_burst_csv;  // every burst's spans, all points
  uint64_t bad_points = 0;    // points whose destination check found words that differ
};

// Called after each point: points done so far, of how many, and what it measured.
using ProbePointDone = std::function<void(size_t done, size_t total, const PlannedPoint&, const ProbeMeasurement&)>;

// Measures every point of `plan` in order with `prober` on the device `dev`
// describes; `dst_size` (the prober's destination) is recorded as given.
ProbeRecording record_probe_sweep(Prober& prober, const DeviceInfo& dev, const std::vector<PlannedPoint>& plan,
                                  const std::string& dst_size, const RunStamp& stamp,
                                  const ProbePointDone& on_point = {});

}  // namespace xstage
