#include "xstage/probe/probe_fit.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/output_file.hpp"
#include "xstage/core/build_info.hpp"
#include "xstage/core/error.hpp"
#include "xstage/model/profile.hpp"

namespace xstage {

namespace {
using nlohmann::json;

json errors_json(const ErrorSummary& e) {
  return {{"median_rel_err", e.median_rel_err}, {"p90_rel_err", e.p90_rel_err}, {"points", e.points}};
}

// One transport's fit and, where it was validated, its validation; the same
// keys either way (null where there was no validation). `points`: with the
// held-out points and onsets (validation-<t>.json), else without (the summary).
json transport_json(const ProbeFit& f, const std::string& command, bool points) {
  const Validation* val = f.validation ? &*f.validation : nullptr;
  const Profile& p = f.fit.profile;
  const double ce = f.copy_engine_Bps;
  const json none;
  json pts = json::array(), onsets = json::array(), models = none;
  if (val) {
    for (const auto& h : val->points) {
      json row{{"K", h.K}, {"V_bytes", h.V_bytes}, {"gap_ns", h.gap_ns}, {"measured_ns", h.measured_ns},
               {"regime", to_string(h.regime)}};
      for (size_t i = 0; i < kAllModels.size(); ++i) {
        row[std::string(to_string(kAllModels[i])) + "_ns"] = h.predicted_ns[i];
        row[std::string(to_string(kAllModels[i])) + "_rel_err"] = h.rel_err[i];
      }
      pts.push_back(row);
    }
    for (const auto& o : val->onsets)
      onsets.push_back({{"K", o.K}, {"V_bytes", o.V_bytes}, {"measured_ns", o.measured_ns},
                        {"predicted_ns", o.predicted_ns}, {"rel_err", o.rel_err}, {"steady_ns", o.steady_ns}});
    models = json::object();
    for (size_t i = 0; i < kAllModels.size(); ++i) models[to_string(kAllModels[i])] = errors_json(val->errors[i]);
  }
  // null: not validated, or no series showed an onset inside its gaps (nothing was compared)
  const bool onset = val && !val->onsets.empty();
  const auto& meta = f.measured;
  auto near = [&](double v) { return p.t0.has_near() ? json(v) : none; };
  auto cold = [&](double v) { return p.has_cold_start() ? json(v) : none; };
  json j = {{"transport", f.transport},
            {"validated", val != nullptr},
            {"R_Bps", p.R_Bps},
            {"Q_bytes", p.Q_bytes},
            {"Q_fill_bytes", p.fill_capacity()},
            {"Q_cold_bytes", cold(p.Q_cold_bytes)},
            {"Q_warm_per_byte", cold(p.Q_warm_per_byte)},
            {"T0", {{"fixed_ns", p.t0.fixed_ns},
                    {"per_producer_Bps", p.t0.per_producer_Bps},
                    {"aggregate_Bps", p.t0.aggregate_Bps},
                    {"near_bytes", near(p.t0.near_bytes)},
                    {"near_per_producer_Bps", near(p.t0.near_per_producer_Bps)}}},
            {"latency_ns", p.latency_ns},
            {"copy_engine_Bps", ce},
            {"R_over_copy_engine", p.R_Bps / ce},
            {"onset_gap_err", onset ? json(val->onset_gap_err) : none},
            {"onset_gap_err_steady", onset ? json(val->onset_gap_err_steady) : none},
            {"onset_series", val ? json(val->onsets.size()) : none},
            {"models", models},
            {"fit_median_abs_rel_err", f.fit.median_abs_rel_err},
            {"fit_notes", f.fit.notes},
            {"samples_csv", f.samples_csv},
            {"measured", {{"device", meta.at("device")}, {"date", meta.at("date")}, {"commit", meta.at("commit")},
                          {"command", meta.at("command")}}},
            {"fitted", {{"commit", build_commit()}, {"command", command}}},
            {"destination_check_failures",
             f.destination_check_failures ? json(*f.destination_check_failures) : none}};
  if (points) {
    j["heldout"] = pts;
    j["onsets"] = onsets;
  }
  return j;
}

}  // namespace

ProbeFit fit_probe_csv(const std::string& csv, const std::string& csv_path, bool validate, int bootstrap,
                       const std::string& command) {
  return fit_probe_samples(parse_samples_csv(csv, csv_path), csv_path, validate, bootstrap, command);
}

ProbeFit fit_probe_samples(SampleSet set, const std::string& csv_path, bool validate, int bootstrap,
                           const std::string& command) {
  ProbeFit f;
  auto meta = [&](const char* key) {
    auto it = set.metadata.find(key);
    if (it == set.metadata.end()) throw Error(fmt::format("{}: no '# {}:' line; expected the provenance lines `xstage probe` writes", csv_path, key));
    return it->second;
  };
  f.transport = meta("transport");
  // It names the files written (profile-<transport>.json): a name, not a path.
  const bool plain = !f.transport.empty() && f.transport.size() <= 64 && f.transport[0] != '.' &&
                     f.transport.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") ==
                         std::string::npos;
  if (!plain)
    throw Error(fmt::format("{}: '# transport: {}'; expected a name of letters, digits, '_', '.' and '-' (local, "
                            "host, peer)",
                            csv_path, f.transport));
  const std::string ce_text = meta("copy_engine_Bps");
  char* ce_end = nullptr;
  const double ce = std::strtod(ce_text.c_str(), &ce_end);
  // A copy engine moves between 1 B/s and 1e18 B/s (a profile's rates,
  // profile.cpp): inf or 1e-300 would print "0.0% of the copy engine's inf".
  if (ce_end == ce_text.c_str() || *ce_end != '\0' || !std::isfinite(ce) || !(ce >= 1) || ce > 1e18)
    throw Error(fmt::format("{}: '# copy_engine_Bps: {}'; expected a rate from 1 to 1e18 bytes/s", csv_path,
                            ce_text));
  f.copy_engine_Bps = ce;
  const std::string device = meta("device");
  FitOptions opt;
  opt.bootstrap = bootstrap;
  if (validate) {
    f.validation = validate_holdout(set.points, opt);
    f.fit = f.validation->fit;
  } else {
    f.fit = fit_profile(set.points, opt);
  }
  Profile& p = f.fit.profile;
  const std::string& transport = f.transport;
  p.name = device.find("H200") != std::string::npos
               ? fmt::format("h200-{}", transport == "host" ? "host-pcie" : transport)
               : fmt::format("measured-{}", transport);
  p.transport = transport;
  p.provenance = {device, meta("driver"), meta("date"), meta("commit"), meta("command"),
                  fmt::format("measured by the command above (SM clock {} MHz measured; copy engine {:.1f} GB/s on the "
                              "same path); fitted on {} training rows of {} by xstage {}: {}",
                              meta("sm_clock_mhz_measured"), ce / 1e9, f.fit.samples, csv_path, build_commit(),
                              command)};
  if (f.validation) f.validation->fit.profile = p;
  f.samples_csv = csv_path;
  f.measured = std::move(set.metadata);
  return f;
}

std::string probe_summary_json(const std::vector<ProbeFit>& fits, const std::string& command) {
  json all = {{"fitted_by_commit", build_commit()}, {"command", command}, {"transports", json::array()}};
  for (const auto& f : fits) all["transports"].push_back(transport_json(f, command, /*points=*/false));
  return all.dump(2) + "\n";
}

namespace {

// One file of a command's output folder: its path and what goes in it.
struct FileText {
  std::string path, text;
};

// `files` all written or none: each aside (OutputFile), then every one renamed
// into place (commit_all). A failure before the renames leaves every target
// as it was; two names for one file are refused first.
void write_all_or_none(const std::vector<FileText>& files, const std::vector<std::string>& inputs,
                       const std::vector<std::string>& options) {
  std::vector<detail::NamedOutput> named;
  for (size_t i = 0; i < files.size(); ++i) named.push_back({files[i].path, options[i]});
  detail::check_outputs(named, inputs);
  std::vector<std::unique_ptr<detail::OutputFile>> out;
  std::vector<detail::OutputFile*> all;
  for (size_t i = 0; i < files.size(); ++i) {
    out.push_back(std::make_unique<detail::OutputFile>(files[i].path, options[i], inputs));
    out.back()->stream() << files[i].text;
    all.push_back(out.back().get());
  }
  detail::commit_all(all);
}

// The files of `fits` in out_dir: profile-<t>.json, validation-<t>.json where
// validated, probe-validation.json where any was. Refuses two fits of one
// transport, whose files would replace each other's.
std::vector<FileText> fit_files(const std::vector<const ProbeFit*>& fits, const std::string& out_dir,
                                const std::string& command) {
  std::vector<FileText> files;
  std::vector<ProbeFit> summary;
  for (size_t i = 0; i < fits.size(); ++i) {
    const ProbeFit& f = *fits[i];
    for (size_t j = 0; j < i; ++j)
      if (fits[j]->transport == f.transport)
        throw Error(fmt::format("{} and {}: both measure the transport '{}', whose files in {} would replace each "
                                "other's; expected one CSV a transport",
                                fits[j]->samples_csv, f.samples_csv, f.transport, out_dir));
    f.fit.profile.validate();
    files.push_back({fmt::format("{}/profile-{}.json", out_dir, f.transport), to_json(f.fit.profile).dump(2) + "\n"});
    if (f.validation)
      files.push_back({fmt::format("{}/validation-{}.json", out_dir, f.transport),
                       transport_json(f, command, /*points=*/true).dump(2) + "\n"});
    summary.push_back(f);
  }
  const bool any = std::any_of(summary.begin(), summary.end(), [](const ProbeFit& f) { return f.validation; });
  if (any) files.push_back({out_dir + "/probe-validation.json", probe_summary_json(summary, command)});
  return files;
}

}  // namespace

void save_probe_outputs(const std::vector<ProbeFit>& fits, const std::string& out_dir, const std::string& command,
                        const std::vector<std::string>& inputs) {
  std::vector<const ProbeFit*> all;
  for (const ProbeFit& f : fits) all.push_back(&f);
  const std::vector<FileText> files = fit_files(all, out_dir, command);
  write_all_or_none(files, inputs, std::vector<std::string>(files.size(), "-o"));
}

void save_probe_run(const std::vector<ProbeRun>& runs, const std::string& out_dir, const std::string& bursts_out,
                    const std::string& command) {
  std::vector<FileText> files;
  std::vector<const ProbeFit*> fits;
  for (const ProbeRun& r : runs) {
    files.push_back({fmt::format("{}/probe-{}.csv", out_dir, r.transport), r.csv});
    if (r.fit) fits.push_back(&*r.fit);
  }
  std::vector<std::string> options(files.size(), "-o");
  for (FileText& f : fit_files(fits, out_dir, command)) {
    files.push_back(std::move(f));
    options.push_back("-o");
  }
  if (!bursts_out.empty()) {
    // The per-burst CSV has no transport column: two transports' bursts in
    // one file could not be told apart (run_probe refuses this before the GPU).
    if (runs.size() != 1)
      throw Error(fmt::format("--bursts-out {}: {} transports measured; expected one (the file has no transport "
                              "column)",
                              bursts_out, runs.size()));
    files.push_back({bursts_out, runs.front().per_burst_csv});
    options.push_back("--bursts-out");
  }
  write_all_or_none(files, {}, options);
}

}  // namespace xstage
