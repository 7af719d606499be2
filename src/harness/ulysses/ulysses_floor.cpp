// The drain rate R of the sweep's physical floor, measured by the probe in
// this process (src/harness/ulysses/ulysses_bench.hpp, ulysses_floor_probe).
#include <chrono>

#include <fmt/format.h>

#include "harness/probe/probe_sweep.hpp"
#include "harness/ulysses/ulysses_bench.hpp"
#include "util/utc_now.hpp"
#include "xstage/core/error.hpp"
#include "xstage/probe/probe_fit.hpp"

namespace xstage {

Transport ulysses_floor_transport(Backend b, Placement p) {
  if (p == Placement::host) return Transport::host;
  return b == Backend::emulated ? Transport::local : Transport::peer;
}

UlyssesFloorRate ulysses_floor_probe(Transport t, int device) {
  const auto t0 = std::chrono::steady_clock::now();
  const DeviceInfo dev = device_info(device);
  // What the fit reads of `xstage probe --sweep quick`: the training points
  // (issue spans: T0, R, Q) and the completion points (latency); the held-out
  // and exploration points only validate.
  std::vector<PlannedPoint> plan;
  for (const PlannedPoint& p : plan_sweep("quick", t, dev.sm_count))
    if (p.set == "train" || p.set == "completion") plan.push_back(p);
  const std::string command = fmt::format("xstage ulysses --floor-probe: the probe's quick sweep on the {} path, "
                                          "training and completion points, in process", to_string(t));
  const std::string dst_size = "256MiB";  // xstage probe's default destination
  ProbeRecording rec;
  {
    Prober prober(t, device, size_t(256) << 20);  // freed before the sweep allocates
    rec = record_probe_sweep(prober, dev, plan, dst_size, RunStamp{detail::utc_now_iso(), command});
  }
  if (rec.bad_points != 0)
    throw Error(fmt::format("ulysses --floor-probe: the probe's destination check failed at {} of {} points on the "
                            "{} path; expected every stored word to arrive",
                            rec.bad_points, plan.size(), to_string(t)));
  const ProbeFit f = fit_probe_csv(rec.csv, "ulysses --floor-probe", false, 0, command);
  if (!f.fit.R_identified)
    throw Error(fmt::format("ulysses --floor-probe: the fit of the {} path did not identify R (no drain-limited "
                            "sample); expected a sweep whose largest bursts fill the stage",
                            to_string(t)));
  UlyssesFloorRate r;
  r.R_Bps = f.fit.profile.R_Bps;
  r.source = "probe";
  r.profile = f.fit.profile.name;
  r.transport = to_string(t);
  r.samples = f.fit.samples;
  r.probe_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace xstage
