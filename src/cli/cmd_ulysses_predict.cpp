// xstage ulysses-predict: the model's prediction for a recorded `xstage ulysses`
// report (its -o JSON), with any profile, on the CPU: the same tile schedule
// through the X-Stage simulator, from the report's attention-only times.
#include <cmath>
#include <iostream>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "harness/ulysses/ulysses_bench.hpp"
#include "util/input_file.hpp"
#include "xstage/core/error.hpp"
#include "xstage/core/units.hpp"
#include "xstage/ulysses/ulysses_prediction.hpp"
#include "xstage/ulysses/ulysses_report.hpp"
#include "xstage/ulysses/ulysses_store_paths.hpp"

namespace xstage::cli {

namespace {

struct UlyssesPredictArgs {
  std::string report;
  std::vector<std::string> profiles;  // empty: the profile the report names
  std::string local_profile;  // whose store T0 the attention-only time contains; "": the report's, else h200-local
  bool store_paths = false;   // per store path, with the ranking agreement
  std::string own_cost_report;  // calibration of the paths' own cost; "": the report's device placement, if any
  bool no_own_cost = false;
  std::string bulk_probe;     // probe CSV giving bulk copies' drain rate over 16-byte stores'
  double tie = 0.005;         // measured residuals closer than this are not a resolved pair
  OutputFlags out;
};

// The fields of each --json row and the columns of --csv (docs/cli-output.md).
const std::vector<std::string> kColumns = {
    "profile",       "profile_source", "local_profile",      "placement",      "S", "attention_only_us", "fused_us",
    "sequential_us", "predicted_fused_us", "predicted_sequential_us", "residual", "predicted_residual"};

nlohmann::json number_or_null(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

const Profile& local_of(const UlyssesPredictArgs& a, const RecordedUlyssesSeries& series,
                        std::map<std::string, Profile>& cache) {
  const std::string name = !a.local_profile.empty()         ? a.local_profile
                           : !series.local_profile.empty() ? series.local_profile
                                                           : std::string(kDefaultLocalProfile);
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, load_local_profile(name)).first;
  return it->second;
}

StorePathKernel path_kernel(const RecordedUlyssesSeries& series, const RecordedUlyssesPoint& pt) {
  UlyssesShape shape = series.shape;
  shape.S = pt.S;
  return wgmma_store_path_kernel(
      ulysses_kernel_shape(shape, series.emulated, 0, series.block_m, series.concurrent_tiles, pt.attention_only_us),
      pt.S, shape.D);
}

// A series whose buffers are the GPU's own memory under emulated ranks: its
// stage drains at TB/s, so what a path costs there beyond the model is the
// path's own instructions.
bool calibration_series(const RecordedUlyssesSeries& s) {
  return s.emulated && (s.placement == "device" || s.buffers == "device");
}

// The paths' own cost: measured less predicted residual on the calibration series.
OwnCost own_cost_from(const std::vector<RecordedUlyssesSeries>& report, const UlyssesPredictArgs& a,
                      std::map<std::string, Profile>& locals) {
  OwnCost oc;
  for (const RecordedUlyssesSeries& series : report) {
    if (!calibration_series(series)) continue;
    const Profile p = load_profile(series.profile);
    const Profile& local = local_of(a, series, locals);
    for (const RecordedUlyssesPoint& pt : series.points) {
      if (!(pt.attention_only_us > 0)) continue;
      for (const auto& [path, measured] : pt.store_residual)
        oc.add(path, pt.S, measured - predict_store_path(p, path_kernel(series, pt), path, {}, &local).residual);
    }
  }
  return oc;
}

std::string percent(double v) { return std::isfinite(v) ? fmt::format("{:.1f}%", 100 * v) : std::string("-"); }

void run_store_paths(const UlyssesPredictArgs& a, const std::vector<RecordedUlyssesSeries>& recorded) {
  std::map<std::string, Profile> locals;
  OwnCost own;
  std::string own_source = "none";
  if (!a.no_own_cost) {
    if (!a.own_cost_report.empty()) {
      own = own_cost_from(read_ulysses_report(a.own_cost_report), a, locals);
      own_source = a.own_cost_report;
      if (own.empty())
        throw Error(fmt::format("--own-cost {}: no emulated series with device buffers to calibrate from; expected a report of `xstage ulysses` with the emulated backend",
                                a.own_cost_report));
    } else {
      own = own_cost_from(recorded, a, locals);
      if (!own.empty()) own_source = a.report + " (device placement)";
    }
  }
  StorePathOptions opt;
  if (!a.bulk_probe.empty()) opt.bulk_drain_ratio = bulk_drain_ratio_from_probe(detail::read_whole_file(a.bulk_probe, false, detail::kMaxDocumentBytes, "a probe CSV"), a.bulk_probe);
  Table t({"placement", "S", "path", "configs", "measured", "predicted", "X-Stage", "own cost", "error",
           "path-blind", "rank"});
  Table c({"profile", "placement", "S", "path", "configs", "measured_residual", "predicted_residual",
           "xstage_residual", "own_cost", "error", "path_blind_residual", "calibration", "spearman", "pairs",
           "agreed", "resolved_pairs", "resolved_agreed"});
  Table r({"placement", "S", "paths", "spearman", "pairs agreed", "resolved pairs agreed", "role"});
  nlohmann::json rows = nlohmann::json::array(), ranking = nlohmann::json::array();
  for (const RecordedUlyssesSeries& series : recorded) {
    const Profile p = load_profile(a.profiles.empty() ? series.profile : a.profiles.front());
    const Profile& local = local_of(a, series, locals);
    const bool calib = calibration_series(series) && !a.no_own_cost && a.own_cost_report.empty();
    const std::string role = calib ? "calibration" : "test";
    const std::string placement = !series.placement.empty() ? series.placement
                                  : !series.buffers.empty() ? series.buffers
                                                            : std::string("-");
    for (const RecordedUlyssesPoint& pt : series.points) {
      if (!(pt.attention_only_us > 0) || pt.store_residual.empty()) continue;
      const StorePathKernel k = path_kernel(series, pt);
      const double blind = predict_ulysses(p, k.kernel, &local).fused_us / pt.attention_only_us - 1;
      std::vector<std::string> paths;
      std::vector<double> measured, predicted, xs, owns;
      for (const auto& [path, m] : pt.store_residual) {
        const double x = predict_store_path(p, k, path, opt, &local).residual;
        const double o = own.at(path, pt.S);
        paths.push_back(path);
        measured.push_back(m);
        xs.push_back(x);
        owns.push_back(o);
        predicted.push_back(x + o);
      }
      const RankAgreement ag = rank_agreement(measured, predicted, a.tie);
      // Rank of each path: 1 = least residual.
      auto rank_of = [](const std::vector<double>& v, size_t i) {
        int r = 1;
        for (size_t j = 0; j < v.size(); ++j) r += v[j] < v[i];
        return r;
      };
      for (size_t i = 0; i < paths.size(); ++i) {
        const double err = predicted[i] - measured[i];
        const int configs = pt.store_configs.at(paths[i]);
        t.add({placement, std::to_string(pt.S), paths[i], std::to_string(configs), percent(measured[i]),
               percent(predicted[i]), percent(xs[i]), percent(owns[i]), fmt::format("{:+.1f}", 100 * err),
               percent(blind), fmt::format("{} / {}", rank_of(measured, i), rank_of(predicted, i))});
        c.add({p.name, placement, std::to_string(pt.S), paths[i], std::to_string(configs),
               fmt::format("{}", measured[i]), fmt::format("{}", predicted[i]), fmt::format("{}", xs[i]),
               fmt::format("{}", owns[i]), fmt::format("{}", err), fmt::format("{}", blind), calib ? "1" : "0",
               fmt::format("{}", ag.spearman), std::to_string(ag.pairs), fmt::format("{}", ag.agreed),
               std::to_string(ag.resolved_pairs), fmt::format("{}", ag.resolved_agreed)});
        rows.push_back({{"profile", p.name}, {"placement", placement}, {"S", pt.S}, {"path", paths[i]},
                        {"configs", configs}, {"measured_residual", measured[i]},
                        {"predicted_residual", predicted[i]}, {"xstage_residual", xs[i]}, {"own_cost", owns[i]},
                        {"error", err}, {"path_blind_residual", blind}, {"measured_rank", rank_of(measured, i)},
                        {"predicted_rank", rank_of(predicted, i)}});
      }
      r.add({placement, std::to_string(pt.S), std::to_string(ag.n),
             std::isfinite(ag.spearman) ? fmt::format("{:.2f}", ag.spearman) : std::string("-"),
             fmt::format("{:g} / {}", ag.agreed, ag.pairs), fmt::format("{:g} / {}", ag.resolved_agreed, ag.resolved_pairs),
             role});
      ranking.push_back({{"profile", p.name}, {"placement", placement}, {"S", pt.S}, {"paths", ag.n},
                         {"spearman", std::isfinite(ag.spearman) ? nlohmann::json(ag.spearman) : nlohmann::json()},
                         {"pairs", ag.pairs}, {"agreed", ag.agreed}, {"resolved_pairs", ag.resolved_pairs},
                         {"resolved_agreed", ag.resolved_agreed}, {"role", role}});
    }
  }
  switch (a.out.format()) {
    case Format::json:
      std::cout << nlohmann::json{{"report", a.report},
                                  {"own_cost_from", own_source},
                                  {"bulk_drain_ratio", opt.bulk_drain_ratio},
                                  {"tie", a.tie},
                                  {"store_paths", rows},
                                  {"ranking", ranking}}
                       .dump(2)
                << "\n";
      return;
    case Format::csv: std::cout << c.csv(); return;
    case Format::table:
      std::cout << fmt::format("own cost from: {}; bulk drain ratio {:.3f}; residuals: least over each path's "
                               "configurations; rank: measured / predicted (1 = least)\n",
                               own_source, opt.bulk_drain_ratio)
                << t.text()
                << fmt::format("\nranking agreement (resolved: measured more than {:.1f} points apart)\n", 100 * a.tie)
                << r.text();
      return;
  }
}

void run_ulysses_predict(const UlyssesPredictArgs& a) {
  const std::vector<RecordedUlyssesSeries> recorded = read_ulysses_report(a.report);
  if (a.store_paths) return run_store_paths(a, recorded);
  nlohmann::json out = nlohmann::json::array();
  Table t({"profile", "placement", "S", "attn-only", "fused", "predicted", "residual", "pred. residual", "sequential",
           "pred. sequential"});
  for (const RecordedUlyssesSeries& series : recorded) {
    const std::vector<std::string> names = a.profiles.empty() ? std::vector<std::string>{series.profile} : a.profiles;
    // The attention-only run stored into the GPU's own memory, whichever path
    // the profiles describe: the profile the report says it used for that
    // (reports before it had none: h200-local).
    const std::string local_name = !a.local_profile.empty()         ? a.local_profile
                                   : !series.local_profile.empty() ? series.local_profile
                                                                   : std::string(kDefaultLocalProfile);
    const Profile local = load_local_profile(local_name);
    for (const std::string& name : names) {
      const Profile p = load_profile(name);
      for (const RecordedUlyssesPoint& pt : series.points) {
        const double att = pt.attention_only_us;
        if (!(att > 0)) continue;  // no attention-only run at this S: nothing to predict from
        UlyssesShape shape = series.shape;
        shape.S = pt.S;
        const UlyssesPrediction pr = predict_ulysses(
            p, ulysses_kernel_shape(shape, series.emulated, 0, series.block_m, series.concurrent_tiles, att), &local);
        // The report's own (paired, per-round) residual where it has one.
        const std::optional<double> residual =
            pt.residual_fused ? pt.residual_fused
                              : pt.fused_us && *pt.fused_us > 0 ? std::optional<double>(*pt.fused_us / att - 1)
                                                                : std::nullopt;
        const double pred_residual = pr.fused_us / att - 1;
        auto time_or_dash = [](const std::optional<double>& us) {
          return us && *us > 0 ? format_ns(*us * 1e3) : std::string("-");
        };
        t.add({name, series.placement.empty() ? "-" : series.placement, std::to_string(shape.S),
               format_ns(att * 1e3), time_or_dash(pt.fused_us), format_ns(pr.fused_us * 1e3),
               residual ? fmt::format("{:.1f}%", 100 * *residual) : std::string("-"),
               fmt::format("{:.1f}%", 100 * pred_residual), time_or_dash(pt.sequential_us),
               format_ns(pr.sequential_us * 1e3)});
        out.push_back({{"profile", p.name},
                       {"profile_source", name},
                       {"local_profile", local.name},
                       {"placement", series.placement.empty() ? nlohmann::json() : nlohmann::json(series.placement)},
                       {"S", shape.S},
                       {"attention_only_us", att},
                       {"fused_us", number_or_null(pt.fused_us)},
                       {"sequential_us", number_or_null(pt.sequential_us)},
                       {"predicted_fused_us", pr.fused_us},
                       {"predicted_sequential_us", pr.sequential_us},
                       {"residual", number_or_null(residual)},
                       {"predicted_residual", pred_residual}});
      }
    }
  }
  switch (a.out.format()) {
    case Format::json: std::cout << nlohmann::json{{"report", a.report}, {"rows", out}}.dump(2) << "\n"; return;
    case Format::csv: std::cout << csv_of(kColumns, out); return;
    case Format::table: std::cout << t.text(); return;
  }
}

}  // namespace

void add_ulysses_predict_command(CLI::App& app) {
  auto a = std::make_shared<UlyssesPredictArgs>();
  auto* sub = app.add_subcommand("ulysses-predict",
                                 "Re-predict a recorded `xstage ulysses -o` report with any profile (CPU only)");
  sub->add_option("report", a->report, "The JSON report of `xstage ulysses -o`")->required();
  sub->add_option("--profile", a->profiles,
                  "Profiles to predict with (names or files; repeatable; default: the one the report used)");
  sub->add_option("--local-profile", a->local_profile,
                  "Profile of the GPU's own memory, whose store T0 the attention-only time contains (name or file; "
                  "default: the report's, else h200-local)");
  sub->add_flag("--store-paths", a->store_paths,
               "Predict every store path of the report's fused rows (its own issue schedule) beside its measured "
               "residual, and how well the prediction ranks the paths at each placement and S");
  sub->add_option("--own-cost", a->own_cost_report,
                  "With --store-paths: a report whose device-buffer (emulated) rows calibrate each path's own cost "
                  "(default: the report's own device placement, if it has one)");
  sub->add_flag("--no-own-cost", a->no_own_cost, "With --store-paths: no own-cost term (the X-Stage alone)");
  sub->add_option("--bulk-probe", a->bulk_probe,
                  "With --store-paths: a probe CSV with bulk and 16-byte runs; bulk copies drain at the ratio of "
                  "their sustained rates (default: the 16-byte R)");
  sub->add_option("--tie", a->tie, "With --store-paths: measured residuals closer than this (fraction) are not a "
                                   "resolved pair (default 0.005)")
      ->check(CLI::Range(0.0, 1.0));
  add_output_flags(sub, a->out);
  sub->callback([a] { run_ulysses_predict(*a); });
}

}  // namespace xstage::cli
