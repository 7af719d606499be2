// xstage ulysses-predict: the model's prediction for a recorded `xstage ulysses`
// report (its -o JSON), with any profile, on the CPU: the same tile schedule
// through the X-Stage simulator, from the report's attention-only times.
#include <iostream>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "xstage/error.hpp"
#include "xstage/ulysses_bench.hpp"
#include "xstage/ulysses_prediction.hpp"
#include "xstage/ulysses_report.hpp"
#include "xstage/units.hpp"

namespace xstage::cli {

namespace {

struct UlyssesPredictArgs {
  std::string report;
  std::vector<std::string> profiles;  // empty: the profile the report names
  std::string local_profile;  // whose store T0 the attention-only time contains; "": the report's, else h200-local
  OutputFlags out;
};

// The fields of each --json row and the columns of --csv (docs/cli-output.md).
const std::vector<std::string> kColumns = {
    "profile",       "profile_source", "local_profile",      "placement",      "S", "attention_only_us", "fused_us",
    "sequential_us", "predicted_fused_us", "predicted_sequential_us", "residual", "predicted_residual"};

nlohmann::json number_or_null(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

void run_ulysses_predict(const UlyssesPredictArgs& a) {
  const std::vector<RecordedUlyssesSeries> recorded = read_ulysses_report(a.report);
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
  add_output_flags(sub, a->out);
  sub->callback([a] { run_ulysses_predict(*a); });
}

}  // namespace xstage::cli
