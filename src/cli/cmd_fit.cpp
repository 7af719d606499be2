// xstage fit: measured bursts (CSV) in, an interconnect profile (JSON) out.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "progress.hpp"
#include "report.hpp"
#include "util/output_file.hpp"
#include "xstage/core/build_info.hpp"
#include "xstage/core/error.hpp"
#include "xstage/core/units.hpp"
#include "xstage/model/fit.hpp"

namespace xstage::cli {

namespace {
struct FitArgs {
  std::string samples, output, name, transport;
  int bootstrap = 40;
  unsigned seed = 12345;
  OutputFlags out;
};


std::string meta(const SampleSet& s, const char* key, const std::string& fallback = "") {
  auto it = s.metadata.find(key);
  return it == s.metadata.end() ? fallback : it->second;
}

// The error for samples whose fit is no interconnect's profile, naming the
// row to look at: one issuing faster than any profile allows (1e18 B/s) or
// slower (1 B/s), else the fastest and slowest rows. A point's rows share K,
// V_bytes and gap_ns; `line` is the first of them.
Error unfittable(const SampleSet& set, const std::string& file, const std::string& why) {
  const SamplePoint *fastest = nullptr, *slowest = nullptr;
  auto rate = [](const SamplePoint& p, double ns) { return p.V_bytes / ns * 1e9; };
  for (const SamplePoint& p : set.points) {
    if (!used_for_issue_fit(p.set) || p.issue_ns.empty()) continue;
    if (!fastest || rate(p, p.issue_ns.entries().front().value) >
                        rate(*fastest, fastest->issue_ns.entries().front().value))
      fastest = &p;
    if (!slowest || rate(p, p.issue_ns.entries().back().value) <
                        rate(*slowest, slowest->issue_ns.entries().back().value))
      slowest = &p;
  }
  const auto column = std::find(set.header.begin(), set.header.end(), "issue_ns") - set.header.begin() + 1;
  auto row = [&](const SamplePoint& p, double ns) {
    return fmt::format("{}:{}: column {} 'issue_ns': {:g} ns to store V_bytes = {:g} with K = {:g}, gap_ns = {:g}{} "
                       "is {:.3g} B/s",
                       file, p.line, column, ns, p.V_bytes, p.K, p.gap_ns,
                       p.issue_ns.count() > 1 ? " (this row or a later one of the same K, V_bytes and gap_ns)" : "",
                       rate(p, ns));
  };
  const std::string cause = fmt::format("these samples fit no interconnect ({})", why);
  if (fastest) {
    const double ns = fastest->issue_ns.entries().front().value;
    if (rate(*fastest, ns) > 1e18)
      return Error(fmt::format("{}; {}; expected at least {:.3g} ns there (1e18 B/s, the fastest rate a profile holds)",
                               row(*fastest, ns), cause, fastest->V_bytes / 1e18 * 1e9));
  }
  if (slowest) {
    const double ns = slowest->issue_ns.entries().back().value;
    if (rate(*slowest, ns) < 1)
      return Error(fmt::format("{}; {}; expected at most {:.3g} ns there (1 B/s, the slowest rate a profile holds)",
                               row(*slowest, ns), cause, slowest->V_bytes * 1e9));
  }
  std::string range;
  if (fastest && slowest)
    range = fmt::format("; the rows issue from {:.3g} B/s ({}:{}) to {:.3g} B/s ({}:{})",
                        rate(*slowest, slowest->issue_ns.entries().back().value), file, slowest->line,
                        rate(*fastest, fastest->issue_ns.entries().front().value), file, fastest->line);
  return Error(fmt::format("{}: {}{}; expected issue times of stores through one interconnect (rates from 1 B/s to "
                           "1e18 B/s)",
                           file, cause, range));
}

void run_fit(const FitArgs& a) {
  if (a.bootstrap < 0 || a.bootstrap > 10000) throw Error(fmt::format("--bootstrap: expected 0 .. 10000, got {}", a.bootstrap));
  // Before the fit: a destination that cannot be written fails now, not after it.
  detail::check_output_path(a.output, "-o", {a.samples});
  ProgressLine progress("fit");
  const SampleSet set = read_samples_csv(a.samples, [&](double f) {
    progress.update(fmt::format("reading {}: {:.0f}%", a.samples, 100 * f));
  });
  FitOptions opt;
  opt.bootstrap = a.bootstrap;
  opt.seed = a.seed;
  opt.progress = [&](const std::string& stage) { progress.update(stage); };
  FitResult r = fit_profile(set.points, opt);
  progress.done();
  Profile& p = r.profile;
  p.transport = !a.transport.empty() ? a.transport : meta(set, "transport", "unknown");
  p.name = !a.name.empty() ? a.name : "fitted-" + p.transport;
  p.provenance.device = meta(set, "device");
  p.provenance.driver = meta(set, "driver");
  p.provenance.date = meta(set, "date", utc_now_iso());
  p.provenance.commit = meta(set, "commit", build_commit());
  p.provenance.command = meta(set, "command");
  p.provenance.notes = fmt::format("fitted by xstage {} on {} from {} ({}); fit command: {}", build_commit(),
                                   utc_now_iso(), a.samples, r.samples, command_line());
  try {
    p.validate();
  } catch (const Error& e) {
    // The profile's own check names the profile, not what it came from.
    throw unfittable(set, a.samples, e.what());
  }
  detail::OutputFile out(a.output, "-o", {a.samples});
  out.stream() << to_json(p).dump(2) << "\n";
  out.commit();

  nlohmann::json pts = nlohmann::json::array();
  for (const auto& f : r.points)
    pts.push_back({{"K", f.K}, {"V_bytes", f.V_bytes}, {"gap_ns", f.gap_ns}, {"n", f.n},
                   {"measured_ns", f.measured_ns}, {"predicted_ns", f.predicted_ns}, {"rel_err", f.rel_err},
                   {"regime", to_string(f.regime)}, {"outliers", f.outliers}});
  if (a.out.format() == Format::json) {
    nlohmann::json j{{"profile", to_json(p)}, {"samples", r.samples}, {"outliers", r.outliers},
                     {"median_abs_rel_err", r.median_abs_rel_err}, {"notes", r.notes}, {"points", pts},
                     {"identified", {{"R", r.R_identified}, {"Q", r.Q_identified},
                                     {"aggregate", r.aggregate_identified}}},
                     {"output", a.output}};
    std::cout << j.dump(2) << "\n";
    return;
  }
  if (a.out.format() == Format::csv) {
    std::cout << csv_of({"K", "V_bytes", "gap_ns", "n", "measured_ns", "predicted_ns", "rel_err", "regime", "outliers"},
                        pts);
    return;
  }
  Table t({"K", "V", "G", "n", "measured", "predicted", "rel_err", "regime", "outliers"});
  for (const auto& f : r.points)
    t.add({fmt::format("{}", f.K), format_bytes(f.V_bytes), format_ns(f.gap_ns), std::to_string(f.n),
           format_ns(f.measured_ns), format_ns(f.predicted_ns), fmt::format("{:+.1f}%", 100 * f.rel_err),
           to_string(f.regime), std::to_string(f.outliers)});
  std::cout << fmt::format("fitted {} samples ({} outliers), median |rel err| {:.2f}%\n", r.samples, r.outliers,
                           100 * r.median_abs_rel_err);
  auto line = [&](const char* label, const std::string& value, double Uncertainty::*field,
                  std::string (*format)(double), bool identified, const char* unidentified) {
    std::cout << fmt::format("  {:<15} {:>12}  {}\n", label, value,
                             !identified ? std::string(unidentified) : sigma_text(p.sigma, field, format));
  };
  line("T0 fixed", format_ns(p.t0.fixed_ns), &Uncertainty::fixed_ns, format_ns, true, "");
  line("T0 per-producer", format_rate(p.t0.per_producer_Bps), &Uncertainty::per_producer_Bps, format_rate, true, "");
  line("T0 aggregate", format_rate(p.t0.aggregate_Bps), &Uncertainty::aggregate_Bps, format_rate,
       r.aggregate_identified, "(not identified: K_max x the per-producer rate)");
  if (p.t0.has_near()) {
    line("T0 near bytes", format_bytes(p.t0.near_bytes), &Uncertainty::near_bytes, format_bytes, true, "");
    line("T0 near rate", format_rate(p.t0.near_per_producer_Bps), &Uncertainty::near_per_producer_Bps, format_rate,
         true, "");
  }
  line("R", format_rate(p.R_Bps), &Uncertainty::R_Bps, format_rate, r.R_identified,
       "(not identified: no drain-limited sample)");
  line("Q", format_bytes(p.Q_bytes), &Uncertainty::Q_bytes, format_bytes, r.Q_identified, "(a lower bound)");
  if (p.has_cold_start()) {
    line("Q cold", format_bytes(p.Q_cold_bytes), &Uncertainty::Q_cold_bytes, format_bytes, true, "");
    line("Q warm per B", fmt::format("{:.3f}", p.Q_warm_per_byte), &Uncertainty::Q_warm_per_byte,
         [](double v) { return fmt::format("{:.3f}", v); }, true, "");
  }
  std::cout << fmt::format("  latency         {:>12}\n", format_ns(p.latency_ns));
  for (const auto& n : r.notes) std::cout << "  note: " << n << "\n";
  std::cout << t.text();
  std::cout << fmt::format("wrote {}\n", a.output);
}
}  // namespace

void add_fit_command(CLI::App& app) {
  auto a = std::make_shared<FitArgs>();
  auto* sub = app.add_subcommand("fit", "Fit T0_iss(K,V), R and Q to measured bursts and write a profile");
  sub->add_option("samples", a->samples, "CSV with columns K,V_bytes,gap_ns,issue_ns (any order)")
      ->required();
  sub->add_option("-o,--output", a->output, "Profile JSON to write")->required();
  sub->add_option("--name", a->name, "Profile name (default fitted-<transport>)");
  sub->add_option("--transport", a->transport, "Transport name (default: the CSV's '# transport:' line)");
  sub->add_option("--bootstrap", a->bootstrap, "Bootstrap resamples for the uncertainties")->capture_default_str();
  sub->add_option("--seed", a->seed, "Bootstrap seed")->capture_default_str();
  add_output_flags(sub, a->out);
  sub->callback([a] { run_fit(*a); });
}

}  // namespace xstage::cli
