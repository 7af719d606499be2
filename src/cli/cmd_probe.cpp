// xstage probe: measure the X-Stage of device-initiated stores (T0_iss, R, Q)
// over a sweep, fit the Burst-Gap model on the training points and validate it
// on held-out points. xstage validate: the same validation from a CSV.
// The recording is the library's (harness/probe/probe_sweep.hpp), and so are the fit
// and its files (xstage/probe/probe_fit.hpp); here the options and the printing.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "harness/probe/probe_sweep.hpp"
#include "report.hpp"
#include "util/input_file.hpp"
#include "util/output_file.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/core/units.hpp"
#include "xstage/probe/probe.hpp"
#include "xstage/probe/probe_fit.hpp"

namespace xstage::cli {

namespace {

struct ProbeArgs {
  std::string transports = "host";
  std::string sweep = "quick";
  std::string out_dir = "probe-out";
  int device = 0;
  std::string dst_size = "256MiB";
  int bootstrap = 40;
  std::vector<int> K;
  std::vector<std::string> V, G, stagger;
  int warps = 8;
  int bursts = 64;
  std::string store = "v4", gap_kind = "spin", completion = "none";
  bool quiet = false;
  bool no_warmup = false;
  std::string settle;         // custom sweep: pause before the measured bursts
  std::string bursts_out;     // custom sweep: per-burst spans of every point
  OutputFlags out;
  bool print_fits = true;     // the fits' summary in out's format after the sweep (report: none)
};

// The fit of one transport, as `xstage probe` and `xstage validate` print it.
void print_probe_fit(const ProbeFit& f) {
  const Profile& p = f.fit.profile;
  const double ce = f.copy_engine_Bps;
  std::cout << fmt::format("\n== {}: {} training rows, fit median |rel err| {:.2f}% ==\n", f.transport, f.fit.samples,
                           100 * f.fit.median_abs_rel_err);
  std::cout << fmt::format("R = {} {} ({:.1f}% of the copy engine's {}), Q = {} {}, Q_fill = {}\n",
                           format_rate(p.R_Bps), sigma_text(p.sigma, &Uncertainty::R_Bps, format_rate),
                           100 * p.R_Bps / ce, format_rate(ce), format_bytes(p.Q_bytes),
                           sigma_text(p.sigma, &Uncertainty::Q_bytes, format_bytes), format_bytes(p.fill_capacity()));
  std::cout << fmt::format("{}, latency {}\n", t0_formula(p), format_ns(p.latency_ns));
  for (const auto& n : f.fit.notes) std::cout << "note: " << n << "\n";
  if (!f.validation) return;
  const Validation& val = *f.validation;
  Table t2({"model", "median |rel err|", "p90 |rel err|", "held-out points"});
  for (size_t i = 0; i < kAllModels.size(); ++i)
    t2.add({to_string(kAllModels[i]), fmt::format("{:.1f}%", 100 * val.errors[i].median_rel_err),
            fmt::format("{:.1f}%", 100 * val.errors[i].p90_rel_err), std::to_string(val.errors[i].points)});
  std::cout << t2.text();
  if (val.onsets.empty())
    std::cout << "backpressure onset gap: no held-out series shows an onset inside its gaps: nothing to compare\n";
  else
    std::cout << fmt::format("backpressure onset gap: median |rel err| {:.1f}% over {} series "
                             "(against the closed-form steady onset: {:.1f}%)\n",
                             100 * val.onset_gap_err, val.onsets.size(), 100 * val.onset_gap_err_steady);
}

// The folder of a command's output files: made if missing, and checked
// writable before any measuring or fitting starts.
void prepare_out_dir(const std::string& dir, const char* what, const std::vector<std::string>& inputs = {}) {
  detail::prepare_output_dir(dir, what, "probe-validation.json", inputs);
}

// `xstage validate --csv` and `xstage probe --csv`: one row per transport and
// model (a transport without held-out rows: one row, its validation empty).
void print_validation_csv(const std::vector<ProbeFit>& fits) {
  const nlohmann::json none;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& f : fits) {
    const Validation* v = f.validation ? &*f.validation : nullptr;
    const bool onset = v && !v->onsets.empty();
    for (size_t i = 0; i < (v ? kAllModels.size() : 1); ++i)
      rows.push_back({{"transport", f.transport},
                      {"model", v ? nlohmann::json(to_string(kAllModels[i])) : none},
                      {"median_rel_err", v ? nlohmann::json(v->errors[i].median_rel_err) : none},
                      {"p90_rel_err", v ? nlohmann::json(v->errors[i].p90_rel_err) : none},
                      {"points", v ? nlohmann::json(v->errors[i].points) : none},
                      {"onset_gap_err", onset ? nlohmann::json(v->onset_gap_err) : none},
                      {"onset_series", v ? nlohmann::json(v->onsets.size()) : none}});
  }
  std::cout << csv_of({"transport", "model", "median_rel_err", "p90_rel_err", "points", "onset_gap_err", "onset_series"},
                      rows);
}

// What probe and validate print after the fits: tables as they went (people),
// or the summary of all transports (programs).
void print_fits(const std::vector<ProbeFit>& fits, Format format) {
  if (format == Format::json) std::cout << probe_summary_json(fits, command_line());
  if (format == Format::csv) print_validation_csv(fits);
}

std::vector<PlannedPoint> custom_plan(const ProbeArgs& a) {
  if (a.K.empty() || a.V.empty() || a.G.empty()) throw Error("a custom sweep needs --K, --V and --G together; expected all three or none (--sweep)");
  std::vector<PlannedPoint> plan;
  const std::vector<std::string> staggers = a.stagger.empty() ? std::vector<std::string>{"0"} : a.stagger;
  for (int K : a.K)
    for (const auto& v : a.V)
      for (const auto& g : a.G)
        for (const auto& sg : staggers) {
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
          p.stagger_ns = parse_time_ns(sg, "--stagger");
          plan.push_back({p, p.stagger_ns > 0 ? "stagger" : "train"});
        }
  return plan;
}

// Measures and fits one transport; writes nothing (run_probe writes every
// transport's files at the end, all or none).
ProbeRun probe_transport(const ProbeArgs& a, Transport t, const DeviceInfo& dev, uint64_t& bad_points) {
  Prober prober(t, a.device, static_cast<size_t>(parse_size_bytes(a.dst_size, "--dst-size")));
  const bool custom = !a.K.empty() || !a.V.empty() || !a.G.empty();
  const std::vector<PlannedPoint> plan = custom ? custom_plan(a) : plan_sweep(a.sweep, t, dev.sm_count);

  size_t last_pct = 0;
  auto on_point = [&](size_t done, size_t total, const PlannedPoint& planned, const ProbeMeasurement& m) {
    const ProbePoint& pt = planned.point;
    if (m.mismatches)
      warn(fmt::format("{}: destination check failed at K={} V={} G={}: {} of {} words differ", to_string(t), pt.K,
                       m.V_bytes, pt.gap_ns, m.mismatches, m.checked_words));
    const size_t pct = done * 10 / total;
    if (!a.quiet && pct != last_pct) {
      std::fprintf(stderr, "probe %s: %zu%% (%zu/%zu points)\n", to_string(t), pct * 10, done, total);
      last_pct = pct;
    }
  };
  const ProbeRecording rec = record_probe_sweep(prober, dev, plan, a.dst_size, {utc_now_iso(), command_line()}, on_point);
  bad_points += rec.bad_points;
  ProbeRun run{to_string(t), rec.csv, rec.per_burst_csv, std::nullopt};
  const std::string csv_path = fmt::format("{}/probe-{}.csv", a.out_dir, to_string(t));

  // Staggered points are recorded but not fitted: only the lock-step ones count towards a fit.
  const auto fitted = static_cast<size_t>(
      std::count_if(plan.begin(), plan.end(), [](const PlannedPoint& p) { return p.set == "train"; }));
  if (custom && fitted < 5) {
    warn(fmt::format("{}: {} points measured, {} of them in lock step (fewer than 5: no fit), {}", to_string(t),
                     plan.size(), fitted, csv_path));
    return run;
  }
  const bool validate = !custom;
  run.fit = fit_probe_csv(rec.csv, csv_path, validate, a.bootstrap, command_line());
  if (validate) run.fit->destination_check_failures = rec.bad_points;
  return run;
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

std::vector<ProbeRun> run_probe(const ProbeArgs& a) {
  const auto transports = parse_transports(a.transports);  // validate arguments before touching the GPU
  if (a.bursts < 2) throw Error(fmt::format("--bursts: expected >= 2, got {}", a.bursts));
  parse_size_bytes(a.dst_size, "--dst-size");
  parse_store_kind(a.store);
  parse_gap_kind(a.gap_kind);
  parse_burst_completion(a.completion);
  if (!a.stagger.empty() && a.K.empty() && a.V.empty() && a.G.empty())
    throw Error("--stagger: expected with a custom sweep (--K, --V and --G)");
  for (const auto& s : a.stagger)
    if (const double ns = parse_time_ns(s, "--stagger"); ns > kMaxStaggerNs)
      throw Error(fmt::format("--stagger: '{}' is {} ns; expected at most {} ns (1 s: a probe run lasts milliseconds)",
                              s, ns, kMaxStaggerNs));
  if (!a.bursts_out.empty() && transports.size() > 1)
    throw Error(fmt::format("--bursts-out {} with --transport {}: the file has no transport column; expected one "
                            "transport",
                            a.bursts_out, a.transports));
  prepare_out_dir(a.out_dir, "-o");
  // --bursts-out: checked before the GPU work, and not one of the folder's files.
  if (!a.bursts_out.empty()) {
    std::vector<detail::NamedOutput> outs = {{a.bursts_out, "--bursts-out"}};
    for (const char* t : {"local", "host", "peer"})
      for (const char* f : {"probe-{}.csv", "profile-{}.json", "validation-{}.json"})
        outs.push_back({fmt::format("{}/{}", a.out_dir, fmt::format(fmt::runtime(f), t)), "-o"});
    outs.push_back({a.out_dir + "/probe-validation.json", "-o"});
    detail::check_outputs(outs);
  }
  if (cuda_device_count() == 0)
    throw Error("probe: no CUDA GPU is visible; expected a machine with a GPU (`xstage report` shows the model on the default profile instead)");
  const DeviceInfo dev = device_info(a.device);
  std::vector<ProbeRun> runs;
  uint64_t bad = 0;
  for (Transport t : transports) runs.push_back(probe_transport(a, t, dev, bad));
  // Every transport measured and fitted, then every file written or none.
  save_probe_run(runs, a.out_dir, a.bursts_out, command_line());
  std::vector<ProbeFit> fits;
  for (const ProbeRun& r : runs)
    if (r.fit) {
      fits.push_back(*r.fit);
      if (a.out.format() == Format::table) print_probe_fit(*r.fit);
    }
  if (a.print_fits) print_fits(fits, a.out.format());
  if (bad)
    throw Error(fmt::format("probe: the destination check failed on {} points (see the warnings; the files are "
                            "written); expected every stored word to arrive",
                            bad));
  return runs;
}
}  // namespace

void run_gpu_report(int K, Format format) {
  ProbeArgs a;
  a.transports = "host";
  a.out_dir = "xstage-report";
  // --json / --csv: stdout holds the model report alone (the fit's tables are in xstage-report/).
  a.print_fits = format == Format::table;
  std::fprintf(stderr, "GPU found: probing the host-mapped PCIe path (quick sweep), results in xstage-report/\n");
  const auto runs = run_probe(a);
  if (format == Format::table) std::cout << "\n";
  print_model_report(runs.front().fit.value().fit.profile, K, format);
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
  sub->add_option("--stagger", a->stagger,
                  "Custom sweep: spreads of the producers' first bursts, a list (0,10us); staggered points are not fitted")
      ->delimiter(',');
  sub->add_option("--bursts-out", a->bursts_out, "Write every burst's spans (all points) to this CSV");
  add_output_flags(sub, a->out);
  sub->callback([a] { run_probe(*a); });

  struct ValidateArgs {
    std::vector<std::string> csvs;
    std::string out_dir = "validation-out";
    int bootstrap = 40;
    OutputFlags out;
  };
  auto v = std::make_shared<ValidateArgs>();
  auto* val = app.add_subcommand("validate",
                                 "Refit probe CSVs (training rows) and predict their held-out rows: profiles, "
                                 "validation files and probe-validation.json");
  val->add_option("samples", v->csvs, "Probe CSVs (xstage probe output, with a set column)")->required();
  val->add_option("-o,--out-dir", v->out_dir, "Folder for profile-<t>.json, validation-<t>.json, probe-validation.json")
      ->capture_default_str();
  val->add_option("--bootstrap", v->bootstrap, "Bootstrap resamples for the fit's uncertainties")->capture_default_str();
  add_output_flags(val, v->out);
  val->callback([v] {
    if (v->bootstrap < 0 || v->bootstrap > 10000)
      throw Error(fmt::format("--bootstrap: expected 0 .. 10000, got {}", v->bootstrap));
    // Before the fits: the folder, and no CSV that is one of the files
    // written there (validate d/profile-host.json -o d would replace its input).
    prepare_out_dir(v->out_dir, "-o", v->csvs);
    for (const auto& path : v->csvs)
      for (const std::string& name : {"profile-", "validation-"})
        for (const char* t : {"local", "host", "peer"})
          detail::check_output_path(fmt::format("{}/{}{}.json", v->out_dir, name, t), "-o", v->csvs);
    std::vector<ProbeFit> fits;
    for (const auto& path : v->csvs)
      fits.push_back(fit_probe_samples(read_samples_csv(path), path, /*validate=*/true, v->bootstrap, command_line()));
    // Every CSV fitted before any file is written, and then all files or none:
    // a CSV that fails leaves the folder as it was.
    save_probe_outputs(fits, v->out_dir, command_line(), v->csvs);
    if (v->out.format() == Format::table)
      for (const ProbeFit& f : fits) print_probe_fit(f);
    print_fits(fits, v->out.format());
  });
}

}  // namespace xstage::cli
