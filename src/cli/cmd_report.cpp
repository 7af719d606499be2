// xstage report: the main job. On a machine with a GPU it probes the host
// path and fits a profile (xstage probe); without one it shows what the
// model and the simulator predict on the embedded default profile.
#include <algorithm>
#include <cmath>
#include <iostream>

#include <fmt/format.h>

#include "commands.hpp"
#include "report.hpp"
#include "xstage/device.hpp"
#include "xstage/model.hpp"
#include "xstage/simulator.hpp"
#include "xstage/units.hpp"

namespace xstage::cli {

void print_model_report(const Profile& p, int K) {
  std::cout << fmt::format("== profile {} ({}, {}) ==\n", p.name, p.transport, p.status);
  std::cout << fmt::format("R = {}, Q = {}, T0 = {} + V / min(K x {}, {}), latency {}\n", format_rate(p.R_Bps),
                           format_bytes(p.Q_bytes), format_ns(p.t0.fixed_ns), format_rate(p.t0.per_producer_Bps),
                           format_rate(p.t0.aggregate_Bps), format_ns(p.latency_ns));
  if (!p.provenance.notes.empty()) std::cout << "provenance: " << p.provenance.notes << "\n";

  const std::vector<double> volumes = {256.0 * 1024, 1024.0 * 1024, 4.0 * 1024 * 1024, 16.0 * 1024 * 1024};
  std::cout << fmt::format("\n== issue time of one burst against the gap (K = {}; f = free, d = drain) ==\n", K);
  std::vector<std::string> header = {"gap G"};
  for (double v : volumes) header.push_back("V=" + format_bytes(v));
  Table t(header);
  for (double g_us : {0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0}) {
    std::vector<std::string> row = {format_ns(g_us * 1e3)};
    for (double v : volumes) {
      const Prediction r = predict(p, K, v, g_us * 1e3);
      row.push_back(format_ns(r.t_iss_ns) + (r.regime == Regime::free ? " f" : " d"));
    }
    t.add(row);
  }
  std::cout << t.text();

  std::cout << "\n== regime boundaries ==\n";
  Table b({"V", "T0_iss", "V/R", "onset gap G*", "gap cap Q/R-fixed", "stalls always", "stall-free bursts at G=0"});
  for (double v : volumes) {
    const Prediction r = predict(p, K, v, 0);
    b.add({format_bytes(v), format_ns(r.t0_ns), format_ns(v / p.R_Bps * 1e9), format_ns(r.onset_gap_ns),
           format_ns(r.gap_cap_ns), r.exceeds_capacity ? "yes" : "no",
           std::isfinite(r.transient_bursts) ? fmt::format("{}", r.transient_bursts) : "all"});
  }
  std::cout << b.text();

  // A simulated schedule that starts empty and settles into the drain regime.
  const double V = 1024.0 * 1024;
  const Prediction at0 = predict(p, K, V, 0);
  const double G = std::isfinite(at0.onset_gap_ns) ? at0.onset_gap_ns / 2 : at0.gap_cap_ns / 2;
  const Prediction pr = predict(p, K, V, G);
  // Long enough to leave the transient (the stage starts empty) well behind.
  const long bursts = std::isfinite(pr.transient_bursts)
                          ? std::clamp(static_cast<long>(3 * pr.transient_bursts) + 20, 40L, 4000L)
                          : 40L;
  StageConfig cfg = stage_from_profile(p);
  const SimResult r = simulate(cfg, periodic_programs(K, V, G, bursts));
  std::cout << fmt::format("\n== simulated: K = {}, V = {}, G = {} (half the onset gap), {} bursts ==\n", K,
                           format_bytes(V), format_ns(G), bursts);
  std::vector<double> per_burst(bursts, 0.0), start(bursts, kInf), stall(bursts, 0.0);
  for (const auto& s : r.bursts) {
    per_burst[s.index] = std::max(per_burst[s.index], s.issue_ns());
    start[s.index] = std::min(start[s.index], s.start_ns);
    stall[s.index] = std::max(stall[s.index], s.stall_ns);
  }
  Table s({"burst", "start", "issue", "stall", "model"});
  for (long i = 0; i < bursts; ++i) {
    if (i >= 8 && i < bursts - 3) continue;
    s.add({std::to_string(i), format_ns(start[i]), format_ns(per_burst[i]), format_ns(stall[i]),
           format_ns(pr.t_iss_ns)});
  }
  std::cout << s.text();
  std::cout << fmt::format("steady state: simulated {} against closed form {}; the first bursts fill the empty stage "
                           "stall-free ({} predicted)\n",
                           format_ns(steady_issue_ns(r, bursts / 2)), format_ns(pr.t_iss_ns),
                           std::isfinite(pr.transient_bursts) ? fmt::format("{}", pr.transient_bursts) : "all");
}

namespace {
struct ReportArgs {
  std::string profile;
  int K = 132;
  bool cpu = false;
};

void run_report(const ReportArgs& a) {
  const int gpus = a.cpu ? 0 : cuda_device_count();
  if (gpus > 0 && a.profile.empty()) {
    run_gpu_report(a.K);
    return;
  }
  if (gpus == 0 && !a.cpu) std::cout << "no GPU here: the model and simulator on the embedded default profile\n";
  print_model_report(a.profile.empty() ? default_profile() : load_profile(a.profile), a.K);
}
}  // namespace

void add_report_command(CLI::App& app) {
  auto a = std::make_shared<ReportArgs>();
  auto* sub = app.add_subcommand("report",
                                 "The main job: probe this GPU and fit it, or (no GPU) show the model's "
                                 "predictions on the default profile");
  sub->add_option("--profile", a->profile, "Show the model for this profile instead of probing");
  sub->add_option("--K", a->K, "Producers (CTAs) in the tables")->capture_default_str();
  sub->add_flag("--cpu", a->cpu, "Do not touch the GPU even where there is one");
  sub->callback([a] { run_report(*a); });
}

}  // namespace xstage::cli
