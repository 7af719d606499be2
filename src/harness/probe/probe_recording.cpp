#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "harness/probe/probe_sweep.hpp"
#include "xstage/core/build_info.hpp"

namespace xstage {

namespace {

double quantile_of(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1) + 0.5)];
}

// Steady state: the last two thirds of the bursts (the first fill an empty stage).
size_t steady_from(size_t n) { return n / 3; }
std::vector<double> steady(const std::vector<double>& v) {
  return std::vector<double>(v.begin() + static_cast<long>(steady_from(v.size())), v.end());
}

// Producers do not stay in lock step: under backpressure some issue while
// others wait, so single spans are spread wide. The time average (the mean
// over bursts) is what the drain rate sets; a median would hide the long ones.
double mean_of(const std::vector<double>& v) {
  if (v.empty()) return NAN;
  double s = 0;
  for (double x : v) s += x;
  return s / v.size();
}

std::string num(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : ""; }

}  // namespace

ProbeRecording record_probe_sweep(Prober& prober, const DeviceInfo& dev, const std::vector<PlannedPoint>& plan,
                                  const std::string& dst_size, const RunStamp& stamp,
                                  const ProbePointDone& on_point) {
  const Transport t = prober.transport();
  const double clock_mhz = prober.cycles_per_ns() * 1e3;
  const double ce = prober.copy_engine_Bps();

  ProbeRecording rec;
  std::string& csv = rec.csv;
  csv += fmt::format("# xstage probe: issue spans of device-initiated stores\n");
  csv += fmt::format("# transport: {}\n# device: {}\n# driver: {}\n# sm_clock_mhz_measured: {:.0f}\n", to_string(t),
                     dev.name, dev.driver, clock_mhz);
  csv += fmt::format("# date: {}\n# commit: {}\n# command: {}\n# copy_engine_Bps: {:.6g}\n# dst_size: {}\n",
                     stamp.date, build_commit(), stamp.command, ce, dst_size);
  csv += "transport,store,gap_kind,completion,warps,K,V_bytes,gap_ns,bursts,steady_from,set,stat,issue_ns,"
         "issue_p10_ns,issue_p90_ns,first_issue_ns,complete_ns,flag_ns,run_ns,sustained_Bps,mismatches,checked_words,"
         "cycles_per_ns,stagger_ns,stagger_realised_ns\n";
  size_t done = 0;
  rec.per_burst_csv = "K,V_bytes,gap_ns,burst,issue_mean_ns,issue_max_ns,fence_ns,flag_ns,stagger_ns\n";
  for (const auto& planned : plan) {
    const auto& [pt, set] = planned;
    const ProbeMeasurement m = prober.run(pt);
    for (size_t b = 0; b < m.issue_mean_ns.size(); ++b)
      rec.per_burst_csv += fmt::format("{},{},{},{},{:.6g},{:.6g},{},{},{}\n", pt.K, m.V_bytes, pt.gap_ns, b,
                                       m.issue_mean_ns[b], m.issue_max_ns[b],
                                       b < m.fence_ns.size() ? num(m.fence_ns[b]) : "",
                                       b < m.complete_ns.size() ? num(m.complete_ns[b]) : "", pt.stagger_ns);
    if (m.mismatches) ++rec.bad_points;
    const std::vector<double> run_row = {m.issue_run_ns};
    const std::vector<double>* stats[] = {&m.issue_max_ns, &m.issue_mean_ns, &run_row};
    const char* names[] = {"max", "mean", "run"};
    for (int s = 0; s < 3; ++s) {
      // max/mean: per-producer spans over the steady bursts; run: the run as a whole, every burst.
      const bool whole = s == 2;
      const auto st = whole ? *stats[s] : steady(*stats[s]);
      // complete_ns: the system-scope fence returning (what a completion-coupled issuer waits for);
      // flag_ns: a receiver on the GPU seeing the release flag written after the burst.
      csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.6g},{},{},{:.4f},{},{}\n", to_string(t),
                         to_string(pt.store), to_string(pt.gap), to_string(pt.completion), pt.warps, pt.K,
                         m.V_bytes, pt.gap_ns, pt.bursts, whole ? 0 : steady_from(pt.bursts), set, names[s],
                         num(mean_of(st)), whole ? "" : num(quantile_of(st, 0.1)),
                         whole ? "" : num(quantile_of(st, 0.9)), num((*stats[s == 2 ? 1 : s])[0]),
                         num(mean_of(steady(m.fence_ns))), num(mean_of(steady(m.complete_ns))), num(m.run_ns),
                         m.sustained_Bps, m.mismatches, m.checked_words, m.cycles_per_ns, pt.stagger_ns,
                         num(m.stagger_realised_ns));
    }
    ++done;
    if (on_point) on_point(done, plan.size(), planned, m);
  }
  return rec;
}

}  // namespace xstage
