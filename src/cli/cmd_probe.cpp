// xstage probe: measure the X-Stage of device-initiated stores (T0_iss, R, Q)
// over a sweep, fit the Burst-Gap model on the training points and validate it
// on held-out points. xstage validate: the same validation from a CSV.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "probe_sweep.hpp"
#include "report.hpp"
#include "xstage/build_info.hpp"
#include "xstage/device.hpp"
#include "xstage/error.hpp"
#include "xstage/probe.hpp"
#include "xstage/units.hpp"
#include "xstage/validate.hpp"

namespace xstage::cli {

namespace {
using nlohmann::json;

struct ProbeArgs {
  std::string transports = "host";
  std::string sweep = "quick";
  std::string out_dir = "probe-out";
  int device = 0;
  std::string dst_size = "256MiB";
  int bootstrap = 40;
  std::vector<int> K;
  std::vector<std::string> V, G;
  int warps = 8;
  int bursts = 64;
  std::string store = "v4", gap_kind = "spin", completion = "none";
  bool quiet = false;
  bool no_warmup = false;
  std::string settle;         // custom sweep: pause before the measured bursts
  std::string bursts_out;     // custom sweep: per-burst spans of every point
  OutputFlags out;
};


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

void write_text(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) throw Error(fmt::format("{}: cannot open for writing", path));
    f << text;
    if (!f) throw Error(fmt::format("{}: write failed", path));
  }
  std::filesystem::rename(tmp, path);
}

json errors_json(const ErrorSummary& e) {
  return {{"median_rel_err", e.median_rel_err}, {"p90_rel_err", e.p90_rel_err}, {"points", e.points}};
}

struct TransportOutcome {
  json validation;  // empty when not validated
  Profile profile;
  uint64_t bad_points = 0;
};

// Fits one probe CSV (and, with held-out rows, validates it); writes
// profile-<transport>.json (and validation-<transport>.json) into out_dir.
// Everything about the measurement (transport, device, clock, copy engine)
// comes from the CSV's "# key: value" lines, so a CSV can be refitted later.
TransportOutcome analyse_csv(const std::string& csv, const std::string& csv_path, const std::string& out_dir,
                             bool validate, int bootstrap) {
  TransportOutcome outcome;
  const SampleSet set = parse_samples_csv(csv, csv_path);
  auto meta = [&](const char* key) {
    auto it = set.metadata.find(key);
    if (it == set.metadata.end()) throw Error(fmt::format("{}: no '# {}:' line", csv_path, key));
    return it->second;
  };
  const std::string transport = meta("transport");
  const std::string ce_text = meta("copy_engine_Bps");
  char* ce_end = nullptr;
  const double ce = std::strtod(ce_text.c_str(), &ce_end);
  if (ce_end == ce_text.c_str() || *ce_end != '\0' || !(ce > 0))
    throw Error(fmt::format("{}: '# copy_engine_Bps: {}' is not a positive number", csv_path, ce_text));
  const std::string device = meta("device");
  FitOptions opt;
  opt.bootstrap = bootstrap;
  FitResult fit;
  Validation val;
  if (validate) {
    val = validate_holdout(set.samples, opt);
    fit = val.fit;
  } else {
    fit = fit_profile(set.samples, opt);
  }
  Profile& p = fit.profile;
  p.name = device.find("H200") != std::string::npos
               ? fmt::format("h200-{}", transport == "host" ? "host-pcie" : transport)
               : fmt::format("measured-{}", transport);
  p.transport = transport;
  p.provenance = {device, meta("driver"), meta("date"), meta("commit"), meta("command"),
                  fmt::format("measured by the command above (SM clock {} MHz measured; copy engine {:.1f} GB/s on the "
                              "same path); fitted on {} training rows of {} by xstage {}: {}",
                              meta("sm_clock_mhz_measured"), ce / 1e9, fit.samples, csv_path, build_commit(),
                              command_line())};
  save_profile(p, fmt::format("{}/profile-{}.json", out_dir, transport));
  outcome.profile = p;

  std::cout << fmt::format("\n== {}: {} training rows, fit median |rel err| {:.2f}% ==\n", transport, fit.samples,
                           100 * fit.median_abs_rel_err);
  const Uncertainty u = p.sigma.value_or(Uncertainty{});
  std::cout << fmt::format("R = {} +- {} ({:.1f}% of the copy engine's {}), Q = {} +- {}, Q_fill = {}\n",
                           format_rate(p.R_Bps), format_rate(u.R_Bps), 100 * p.R_Bps / ce, format_rate(ce),
                           format_bytes(p.Q_bytes), format_bytes(u.Q_bytes), format_bytes(p.fill_capacity()));
  std::cout << fmt::format("T0 = {} + V / min(K x {}, {}), latency {}\n", format_ns(p.t0.fixed_ns),
                           format_rate(p.t0.per_producer_Bps), format_rate(p.t0.aggregate_Bps), format_ns(p.latency_ns));
  for (const auto& n : fit.notes) std::cout << "note: " << n << "\n";
  if (!validate) return outcome;

  Table t2({"model", "median |rel err|", "p90 |rel err|", "held-out points"});
  for (size_t i = 0; i < kAllModels.size(); ++i)
    t2.add({to_string(kAllModels[i]), fmt::format("{:.1f}%", 100 * val.errors[i].median_rel_err),
            fmt::format("{:.1f}%", 100 * val.errors[i].p90_rel_err), std::to_string(val.errors[i].points)});
  std::cout << t2.text();
  std::cout << fmt::format("backpressure onset gap: median |rel err| {:.1f}% over {} series "
                           "(against the closed-form steady onset: {:.1f}%)\n",
                           100 * val.onset_gap_err, val.onsets.size(), 100 * val.onset_gap_err_steady);

  json pts = json::array();
  for (const auto& h : val.points) {
    json row{{"K", h.K}, {"V_bytes", h.V_bytes}, {"gap_ns", h.gap_ns}, {"measured_ns", h.measured_ns},
             {"regime", to_string(h.regime)}};
    for (size_t i = 0; i < kAllModels.size(); ++i) {
      row[std::string(to_string(kAllModels[i])) + "_ns"] = h.predicted_ns[i];
      row[std::string(to_string(kAllModels[i])) + "_rel_err"] = h.rel_err[i];
    }
    pts.push_back(row);
  }
  json onsets = json::array();
  for (const auto& o : val.onsets)
    onsets.push_back({{"K", o.K}, {"V_bytes", o.V_bytes}, {"measured_ns", o.measured_ns},
                      {"predicted_ns", o.predicted_ns}, {"rel_err", o.rel_err}, {"steady_ns", o.steady_ns}});
  json models;
  for (size_t i = 0; i < kAllModels.size(); ++i) models[to_string(kAllModels[i])] = errors_json(val.errors[i]);
  outcome.validation = {{"transport", transport},
                        {"R_Bps", p.R_Bps},
                        {"Q_bytes", p.Q_bytes},
                        {"Q_fill_bytes", p.fill_capacity()},
                        {"T0", {{"fixed_ns", p.t0.fixed_ns},
                                {"per_producer_Bps", p.t0.per_producer_Bps},
                                {"aggregate_Bps", p.t0.aggregate_Bps}}},
                        {"latency_ns", p.latency_ns},
                        {"copy_engine_Bps", ce},
                        {"R_over_copy_engine", p.R_Bps / ce},
                        {"onset_gap_err", val.onset_gap_err},
                        {"onset_gap_err_steady", val.onset_gap_err_steady},
                        {"models", models},
                        {"fit_median_abs_rel_err", fit.median_abs_rel_err},
                        {"fit_notes", fit.notes},
                        {"samples_csv", csv_path},
                        {"measured", {{"device", device}, {"date", meta("date")}, {"commit", meta("commit")},
                                      {"command", meta("command")}}},
                        {"fitted", {{"commit", build_commit()}, {"command", command_line()}}},
                        {"heldout", pts},
                        {"onsets", onsets}};
  write_text(fmt::format("{}/validation-{}.json", out_dir, transport), outcome.validation.dump(2) + "\n");
  return outcome;
}

// probe-validation.json: per transport R, Q, T0, copy engine and the models' errors (no per-point rows).
void write_summary(const std::vector<TransportOutcome>& outcomes, const std::string& out_dir) {
  json all = {{"fitted_by_commit", build_commit()}, {"command", command_line()}, {"transports", json::array()}};
  for (const auto& o : outcomes) {
    if (o.validation.is_null()) continue;
    json slim = o.validation;
    slim.erase("heldout");
    slim.erase("onsets");
    all["transports"].push_back(slim);
  }
  if (!all["transports"].empty()) write_text(out_dir + "/probe-validation.json", all.dump(2) + "\n");
}

TransportOutcome probe_transport(const ProbeArgs& a, Transport t, const DeviceInfo& dev) {
  Prober prober(t, a.device, static_cast<size_t>(parse_size_bytes(a.dst_size, "--dst-size")));
  const double clock_mhz = prober.cycles_per_ns() * 1e3;
  const double ce = prober.copy_engine_Bps();

  std::vector<PlannedPoint> plan;
  const bool custom = !a.K.empty() || !a.V.empty() || !a.G.empty();
  if (custom) {
    if (a.K.empty() || a.V.empty() || a.G.empty()) throw Error("a custom sweep needs --K, --V and --G together");
    for (int K : a.K)
      for (const auto& v : a.V)
        for (const auto& g : a.G) {
          ProbePoint p;
          p.K = K;
          p.V_bytes = parse_size_bytes(v, "--V");
          p.gap_ns = parse_time_ns(g, "--G");
          p.warps = a.warps;
          p.bursts = a.bursts;
          p.store = parse_store_kind(a.store);
          p.gap = parse_gap_kind(a.gap_kind);
          p.completion = parse_burst_completion(a.completion);
          p.warmup = !a.no_warmup;
          if (!a.settle.empty()) p.settle_ns = parse_time_ns(a.settle, "--settle");
          plan.push_back({p, "train"});
        }
  } else {
    plan = plan_sweep(a.sweep, t, dev.sm_count);
  }

  std::string csv;
  csv += fmt::format("# xstage probe: issue spans of device-initiated stores\n");
  csv += fmt::format("# transport: {}\n# device: {}\n# driver: {}\n# sm_clock_mhz_measured: {:.0f}\n", to_string(t),
                     dev.name, dev.driver, clock_mhz);
  csv += fmt::format("# date: {}\n# commit: {}\n# command: {}\n# copy_engine_Bps: {:.6g}\n# dst_size: {}\n",
                     utc_now_iso(), build_commit(), command_line(), ce, a.dst_size);
  csv += "transport,store,gap_kind,completion,warps,K,V_bytes,gap_ns,bursts,steady_from,set,stat,issue_ns,"
         "issue_p10_ns,issue_p90_ns,first_issue_ns,complete_ns,flag_ns,run_ns,sustained_Bps,mismatches,checked_words,"
         "cycles_per_ns\n";
  TransportOutcome outcome;
  size_t done = 0, last_pct = 0;
  std::string per_burst = "K,V_bytes,gap_ns,burst,issue_mean_ns,issue_max_ns,fence_ns,flag_ns\n";
  for (const auto& [pt, set] : plan) {
    const ProbeMeasurement m = prober.run(pt);
    for (size_t b = 0; b < m.issue_mean_ns.size(); ++b)
      per_burst += fmt::format("{},{},{},{},{:.6g},{:.6g},{},{}\n", pt.K, m.V_bytes, pt.gap_ns, b, m.issue_mean_ns[b],
                               m.issue_max_ns[b], b < m.fence_ns.size() ? num(m.fence_ns[b]) : "",
                               b < m.complete_ns.size() ? num(m.complete_ns[b]) : "");
    if (m.mismatches) {
      ++outcome.bad_points;
      warn(fmt::format("{}: destination check failed at K={} V={} G={}: {} of {} words differ", to_string(t), pt.K,
                       m.V_bytes, pt.gap_ns, m.mismatches, m.checked_words));
    }
    const std::vector<double> run_row = {m.issue_run_ns};
    const std::vector<double>* stats[] = {&m.issue_max_ns, &m.issue_mean_ns, &run_row};
    const char* names[] = {"max", "mean", "run"};
    for (int s = 0; s < 3; ++s) {
      // max/mean: per-producer spans over the steady bursts; run: the run as a whole, every burst.
      const bool whole = s == 2;
      const auto st = whole ? *stats[s] : steady(*stats[s]);
      // complete_ns: the system-scope fence returning (what a completion-coupled issuer waits for);
      // flag_ns: a receiver on the GPU seeing the release flag written after the burst.
      csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.6g},{},{},{:.4f}\n", to_string(t),
                         to_string(pt.store), to_string(pt.gap), to_string(pt.completion), pt.warps, pt.K,
                         m.V_bytes, pt.gap_ns, pt.bursts, whole ? 0 : steady_from(pt.bursts), set, names[s],
                         num(mean_of(st)), whole ? "" : num(quantile_of(st, 0.1)),
                         whole ? "" : num(quantile_of(st, 0.9)), num((*stats[s == 2 ? 1 : s])[0]),
                         num(mean_of(steady(m.fence_ns))), num(mean_of(steady(m.complete_ns))), num(m.run_ns),
                         m.sustained_Bps, m.mismatches, m.checked_words, m.cycles_per_ns);
    }
    ++done;
    const size_t pct = done * 10 / plan.size();
    if (!a.quiet && pct != last_pct) {
      std::fprintf(stderr, "probe %s: %zu%% (%zu/%zu points)\n", to_string(t), pct * 10, done, plan.size());
      last_pct = pct;
    }
  }
  std::filesystem::create_directories(a.out_dir);
  if (!a.bursts_out.empty()) write_text(a.bursts_out, per_burst);
  const std::string csv_path = fmt::format("{}/probe-{}.csv", a.out_dir, to_string(t));
  write_text(csv_path, csv);

  if (custom && plan.size() < 5) {
    std::cout << fmt::format("{}: {} points measured (fewer than 5: no fit), {}\n", to_string(t), plan.size(),
                             csv_path);
    return outcome;
  }
  const uint64_t bad = outcome.bad_points;
  outcome = analyse_csv(csv, csv_path, a.out_dir, /*validate=*/!custom, a.bootstrap);
  outcome.bad_points = bad;
  if (!outcome.validation.is_null()) {
    outcome.validation["destination_check_failures"] = bad;
    write_text(fmt::format("{}/validation-{}.json", a.out_dir, to_string(t)), outcome.validation.dump(2) + "\n");
  }
  return outcome;
}

std::vector<Transport> parse_transports(const std::string& list) {
  std::vector<Transport> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t comma = list.find(',', pos);
    out.push_back(parse_transport(list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos)));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::vector<TransportOutcome> run_probe(const ProbeArgs& a) {
  const auto transports = parse_transports(a.transports);  // validate arguments before touching the GPU
  if (a.bursts < 2) throw Error(fmt::format("--bursts: expected >= 2, got {}", a.bursts));
  parse_size_bytes(a.dst_size, "--dst-size");
  parse_store_kind(a.store);
  parse_gap_kind(a.gap_kind);
  parse_burst_completion(a.completion);
  if (cuda_device_count() == 0)
    throw Error("probe: no CUDA GPU is visible; `xstage report` shows the model on the default profile instead");
  const DeviceInfo dev = device_info(a.device);
  std::vector<TransportOutcome> outcomes;
  uint64_t bad = 0;
  for (Transport t : transports) {
    outcomes.push_back(probe_transport(a, t, dev));
    bad += outcomes.back().bad_points;
  }
  write_summary(outcomes, a.out_dir);
  if (bad) throw Error(fmt::format("probe: the destination check failed on {} points (see the warnings)", bad));
  return outcomes;
}
}  // namespace

void run_gpu_report(int K) {
  ProbeArgs a;
  a.transports = "host";
  a.out_dir = "xstage-report";
  std::cout << "GPU found: probing the host-mapped PCIe path (quick sweep), results in xstage-report/\n";
  const auto outcomes = run_probe(a);
  std::cout << "\n";
  print_model_report(outcomes.front().profile, K);
}

void add_probe_command(CLI::App& app) {
  auto a = std::make_shared<ProbeArgs>();
  auto* sub = app.add_subcommand("probe", "Measure T0_iss, R and Q of device-initiated stores on this GPU");
  sub->add_option("--transport", a->transports, "local, host or peer; a comma list measures several")
      ->capture_default_str();
  sub->add_option("--sweep", a->sweep, "quick (under a minute per transport) or full")->capture_default_str();
  sub->add_option("-o,--out-dir", a->out_dir, "Folder for probe-<t>.csv, profile-<t>.json, validation files")
      ->capture_default_str();
  sub->add_option("--device", a->device, "CUDA device")->capture_default_str();
  sub->add_option("--dst-size", a->dst_size, "Destination buffer; bursts rotate through it")->capture_default_str();
  sub->add_option("--bootstrap", a->bootstrap, "Bootstrap resamples for the fit's uncertainties")->capture_default_str();
  sub->add_option("--K", a->K, "Custom sweep: producers (CTAs), a list")->delimiter(',');
  sub->add_option("--V", a->V, "Custom sweep: burst volumes, a list (2MiB,4e6)")->delimiter(',');
  sub->add_option("--G", a->G, "Custom sweep: gaps, a list (0,20us)")->delimiter(',');
  sub->add_option("--warps", a->warps, "Custom sweep: warps per producer")->capture_default_str();
  sub->add_option("--bursts", a->bursts, "Custom sweep: bursts per point")->capture_default_str();
  sub->add_option("--store", a->store, "Custom sweep: v4, b64, b32 or bulk (TMA)")->capture_default_str();
  sub->add_option("--gap-kind", a->gap_kind, "Custom sweep: spin, fma or mma")->capture_default_str();
  sub->add_option("--completion", a->completion, "Custom sweep: none, fence or flag")->capture_default_str();
  sub->add_flag("--quiet", a->quiet, "No progress lines");
  sub->add_flag("--no-warmup", a->no_warmup, "Custom sweep: no warm-up pass before the measured bursts");
  sub->add_option("--settle", a->settle, "Custom sweep: pause before the measured bursts (default: drain the warm-up)");
  sub->add_option("--bursts-out", a->bursts_out, "Write every burst's spans (all points) to this CSV");
  sub->callback([a] { run_probe(*a); });

  struct ValidateArgs {
    std::vector<std::string> csvs;
    std::string out_dir = "validation-out";
    int bootstrap = 40;
  };
  auto v = std::make_shared<ValidateArgs>();
  auto* val = app.add_subcommand("validate",
                                 "Refit probe CSVs (training rows) and predict their held-out rows: profiles, "
                                 "validation files and probe-validation.json");
  val->add_option("samples", v->csvs, "Probe CSVs (xstage probe output, with a set column)")->required();
  val->add_option("-o,--out-dir", v->out_dir, "Folder for profile-<t>.json, validation-<t>.json, probe-validation.json")
      ->capture_default_str();
  val->add_option("--bootstrap", v->bootstrap, "Bootstrap resamples for the fit's uncertainties")->capture_default_str();
  val->callback([v] {
    std::filesystem::create_directories(v->out_dir);
    std::vector<TransportOutcome> outcomes;
    for (const auto& path : v->csvs) {
      std::ifstream in(path);
      if (!in) throw Error(fmt::format("{}: cannot open for reading", path));
      std::stringstream ss;
      ss << in.rdbuf();
      outcomes.push_back(analyse_csv(ss.str(), path, v->out_dir, /*validate=*/true, v->bootstrap));
    }
    write_summary(outcomes, v->out_dir);
  });
}

}  // namespace xstage::cli
