// xstage report: the main job. On a machine with a GPU it probes the host
// path and fits a profile (xstage probe); without one it shows what the
// model and the simulator predict on the embedded default profile.
#include <algorithm>
#include <cmath>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "progress.hpp"
#include "report.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/core/limits.hpp"
#include "xstage/core/units.hpp"
#include "xstage/model/model.hpp"
#include "xstage/model/simulator.hpp"

namespace xstage::cli {

// T0 as the tables compute it: with the near queue's term where the profile has one.
std::string t0_formula(const Profile& p) {
  if (!p.t0.has_near())
    return fmt::format("T0 = {} + V / min(K x {}, {})", format_ns(p.t0.fixed_ns), format_rate(p.t0.per_producer_Bps),
                       format_rate(p.t0.aggregate_Bps));
  return fmt::format("T0 = {} + V_near / min(K x {}, {}) + (V - V_near) / min(K x {}, {}), V_near = min(V, K x {})",
                     format_ns(p.t0.fixed_ns), format_rate(p.t0.near_per_producer_Bps), format_rate(p.t0.aggregate_Bps),
                     format_rate(p.t0.per_producer_Bps), format_rate(p.t0.aggregate_Bps),
                     format_bytes(p.t0.near_bytes));
}

std::string sigma_text(const std::optional<Uncertainty>& sigma, double Uncertainty::*field,
                       std::string (*format)(double)) {
  if (!sigma) return "";
  const double v = (*sigma).*field;
  return std::isnan(v) ? std::string("(not identified)") : "+- " + format(v);
}

namespace {

const std::vector<double> kReportVolumes = {256.0 * 1024, 1024.0 * 1024, 4.0 * 1024 * 1024, 16.0 * 1024 * 1024};
const std::vector<double> kReportGapsUs = {0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0};

// One simulated burst index: the slowest producer's issue span and stall, the earliest start.
struct SimulatedBurst {
  double start_ns = kInf, issue_ns = 0, stall_ns = 0;
};

struct SimulatedRun {
  double V = 0, G = 0;
  long bursts = 0;
  Prediction model;
  std::vector<SimulatedBurst> per_index;
  double steady_ns = 0;
};

// A schedule that starts empty and settles into the drain regime, streamed:
// memory grows with the burst count (at most 4000), not with K.
SimulatedRun simulate_for_report(const Profile& p, int K) {
  SimulatedRun run;
  run.V = 1024.0 * 1024;
  const Prediction at0 = predict(p, K, run.V, 0);
  run.G = std::isfinite(at0.onset_gap_ns) ? at0.onset_gap_ns / 2 : at0.gap_cap_ns / 2;
  run.model = predict(p, K, run.V, run.G);
  // Long enough to leave the transient (the stage starts empty) well behind,
  // within the simulator's bound on bursts.
  const long most = std::max(2L, static_cast<long>(kMaxSimulatedBursts / K));
  run.bursts = std::isfinite(run.model.transient_bursts)
                   ? std::clamp(static_cast<long>(3 * run.model.transient_bursts) + 20, 40L, 4000L)
                   : 40L;
  run.bursts = std::min(run.bursts, most);
  run.per_index.assign(static_cast<size_t>(run.bursts), SimulatedBurst{});
  SteadyIssueTracker steady(static_cast<size_t>(K), run.bursts / 2);
  ProgressLine progress("report: simulating");
  SimObserver obs;
  obs.on_burst = [&](const BurstSpan& b) {
    SimulatedBurst& s = run.per_index[static_cast<size_t>(b.index)];
    s.issue_ns = std::max(s.issue_ns, b.issue_ns());
    s.start_ns = std::min(s.start_ns, b.start_ns);
    s.stall_ns = std::max(s.stall_ns, b.stall_ns);
    steady.add(b);
  };
  obs.on_progress = [&](double f) { progress.update(f); };
  simulate(stage_from_profile(p), periodic_programs(K, run.V, run.G, run.bursts), obs);
  progress.done();
  run.steady_ns = steady.median();
  return run;
}

std::string transient_text(double bursts) {
  return std::isfinite(bursts) ? fmt::format("{}", bursts) : std::string("all");
}

// The issue-time grid, one row per (gap, V): --json's issue_vs_gap and --csv.
nlohmann::json issue_vs_gap(const Profile& p, int K) {
  nlohmann::json grid = nlohmann::json::array();
  for (double g_us : kReportGapsUs)
    for (double v : kReportVolumes) {
      const Prediction r = predict(p, K, v, g_us * 1e3);
      grid.push_back({{"gap_ns", g_us * 1e3}, {"V_bytes", v}, {"t_iss_ns", r.t_iss_ns}, {"regime", to_string(r.regime)}});
    }
  return grid;
}

nlohmann::json report_json(const Profile& p, int K, const SimulatedRun& run) {
  using nlohmann::json;
  const json grid = issue_vs_gap(p, K);
  json bounds = json::array();
  for (double v : kReportVolumes) {
    const Prediction r = predict(p, K, v, 0);
    bounds.push_back({{"V_bytes", v}, {"t0_ns", r.t0_ns}, {"drain_ns", v / p.R_Bps * 1e9},
                      {"onset_gap_ns", std::isfinite(r.onset_gap_ns) ? json(r.onset_gap_ns) : json()},
                      {"gap_cap_ns", std::isfinite(r.gap_cap_ns) ? json(r.gap_cap_ns) : json()},
                      {"exceeds_capacity", r.exceeds_capacity},
                      {"transient_bursts", std::isfinite(r.transient_bursts) ? json(r.transient_bursts) : json()}});
  }
  json bursts = json::array();
  for (long i = 0; i < run.bursts; ++i) {
    const SimulatedBurst& b = run.per_index[static_cast<size_t>(i)];
    bursts.push_back({{"index", i}, {"start_ns", b.start_ns}, {"issue_ns", b.issue_ns}, {"stall_ns", b.stall_ns}});
  }
  return {{"profile", to_json(p)},
          {"K", K},
          {"t0_formula", t0_formula(p)},
          {"issue_vs_gap", grid},
          {"regime_boundaries", bounds},
          {"simulated", {{"V_bytes", run.V}, {"gap_ns", run.G}, {"bursts", run.bursts},
                         {"steady_issue_ns", run.steady_ns}, {"model_t_iss_ns", run.model.t_iss_ns},
                         {"per_burst", bursts}}}};
}

}  // namespace

void print_model_report(const Profile& p, int K, Format format) {
  if (K < 1 || K > kMaxProducers)
    throw Error(fmt::format("--K: expected a whole number in [1, {}], got {}", kMaxProducers, K));
  if (format == Format::csv) {
    std::cout << csv_of({"gap_ns", "V_bytes", "t_iss_ns", "regime"}, issue_vs_gap(p, K));
    return;
  }
  const SimulatedRun run = simulate_for_report(p, K);
  if (format == Format::json) {
    std::cout << report_json(p, K, run).dump(2) << "\n";
    return;
  }
  std::cout << fmt::format("== profile {} ({}, {}) ==\n", p.name, p.transport, p.status);
  std::cout << fmt::format("R = {}, Q = {}, {}, latency {}\n", format_rate(p.R_Bps), format_bytes(p.Q_bytes),
                           t0_formula(p), format_ns(p.latency_ns));
  if (!p.provenance.notes.empty()) std::cout << "provenance: " << p.provenance.notes << "\n";

  std::cout << fmt::format("\n== issue time of one burst against the gap (K = {}; f = free, d = drain) ==\n", K);
  std::vector<std::string> header = {"gap G"};
  for (double v : kReportVolumes) header.push_back("V=" + format_bytes(v));
  Table t(header);
  for (double g_us : kReportGapsUs) {
    std::vector<std::string> row = {format_ns(g_us * 1e3)};
    for (double v : kReportVolumes) {
      const Prediction r = predict(p, K, v, g_us * 1e3);
      row.push_back(format_ns(r.t_iss_ns) + (r.regime == Regime::free ? " f" : " d"));
    }
    t.add(row);
  }
  std::cout << t.text();

  std::cout << "\n== regime boundaries ==\n";
  Table b({"V", "T0_iss", "V/R", "onset gap G*", "gap cap Q/R-fixed", "stalls always", "stall-free bursts at G=0"});
  for (double v : kReportVolumes) {
    const Prediction r = predict(p, K, v, 0);
    b.add({format_bytes(v), format_ns(r.t0_ns), format_ns(v / p.R_Bps * 1e9), format_ns(r.onset_gap_ns),
           format_ns(r.gap_cap_ns), r.exceeds_capacity ? "yes" : "no", transient_text(r.transient_bursts)});
  }
  std::cout << b.text();

  std::cout << fmt::format("\n== simulated: K = {}, V = {}, G = {} (half the onset gap), {} bursts ==\n", K,
                           format_bytes(run.V), format_ns(run.G), run.bursts);
  Table s({"burst", "start", "issue", "stall", "model"});
  for (long i = 0; i < run.bursts; ++i) {
    if (i >= 8 && i < run.bursts - 3) continue;
    const SimulatedBurst& sb = run.per_index[static_cast<size_t>(i)];
    s.add({std::to_string(i), format_ns(sb.start_ns), format_ns(sb.issue_ns), format_ns(sb.stall_ns),
           format_ns(run.model.t_iss_ns)});
  }
  std::cout << s.text();
  std::cout << fmt::format("steady state: simulated {} against closed form {}; the first bursts fill the empty stage "
                           "stall-free ({} predicted)\n",
                           format_ns(run.steady_ns), format_ns(run.model.t_iss_ns),
                           transient_text(run.model.transient_bursts));
}

namespace {
struct ReportArgs {
  std::string profile;
  int K = 132;
  bool cpu = false;
  OutputFlags out;
};

void run_report(const ReportArgs& a) {
  const int gpus = a.cpu ? 0 : cuda_device_count();
  if (a.K < 1 || a.K > kMaxProducers)
    throw Error(fmt::format("--K: expected a whole number in [1, {}], got {}", kMaxProducers, a.K));
  if (gpus > 0 && a.profile.empty()) {
    run_gpu_report(a.K, a.out.format());
    return;
  }
  if (gpus == 0 && !a.cpu && a.out.format() == Format::table)
    std::cout << "no GPU here: the model and simulator on the embedded default profile\n";
  print_model_report(a.profile.empty() ? default_profile() : load_profile(a.profile), a.K, a.out.format());
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
  add_output_flags(sub, a->out);
  sub->callback([a] { run_report(*a); });
}

}  // namespace xstage::cli
