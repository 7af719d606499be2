// xstage ulysses-predict: the model's prediction for a recorded `xstage ulysses`
// report (its -o JSON), with any profile, on the CPU: the same tile schedule
// through the X-Stage simulator, from the report's attention-only times.
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "xstage/error.hpp"
#include "xstage/ulysses_bench.hpp"
#include "xstage/ulysses_prediction.hpp"
#include "xstage/units.hpp"

namespace xstage::cli {

namespace {

struct UlyssesPredictArgs {
  std::string report;
  std::vector<std::string> profiles;  // empty: the profile the report names
  std::string local_profile;  // whose store T0 the attention-only time contains; "": the report's, else h200-local
  OutputFlags out;
};

template <class T>
T field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) throw Error(fmt::format("{}: no \"{}\" (expected an `xstage ulysses -o` report)", where, key));
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(fmt::format("{}: \"{}\" has the wrong type", where, key));
  }
}

void run_ulysses_predict(const UlyssesPredictArgs& a) {
  std::ifstream in(a.report);
  if (!in) throw Error(fmt::format("{}: cannot open", a.report));
  nlohmann::json rep;
  try {
    in >> rep;
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not JSON ({})", a.report, e.what()));
  }
  const auto rows = field<nlohmann::json>(rep, "rows", a.report);
  const auto summary = field<nlohmann::json>(rep, "summary", a.report);
  if (!rows.is_array() || rows.empty() || !summary.is_array())
    throw Error(fmt::format("{}: expected non-empty \"rows\" and a \"summary\" list", a.report));
  const auto& r0 = rows.front();
  const std::string where = a.report + ": rows[0]";
  UlyssesShape shape;
  shape.P = field<int>(r0, "P", where);
  shape.B = field<int64_t>(r0, "B", where);
  shape.H = field<int64_t>(r0, "H", where);
  shape.D = field<int64_t>(r0, "D", where);
  const bool emulated = field<std::string>(r0, "backend", where) == "emulated";
  const int block_m = field<int>(rep, "block_m", a.report);
  const int concurrent = field<int>(rep, "concurrent_tiles", a.report);
  const std::vector<std::string> names =
      a.profiles.empty() ? std::vector<std::string>{field<std::string>(rep, "profile", a.report)} : a.profiles;

  // The attention-only run stored into the GPU's own memory, whichever path
  // the profiles describe: the profile the report says it used for that
  // (reports before it had none: h200-local).
  const std::string local_name = !a.local_profile.empty() ? a.local_profile
                                 : rep.contains("local_profile") && rep["local_profile"].is_string() &&
                                         rep["local_profile"] != "none"
                                     ? rep["local_profile"].get<std::string>()
                                     : std::string(kDefaultLocalProfile);
  const Profile local = load_local_profile(local_name);

  nlohmann::json out = nlohmann::json::array();
  Table t({"profile", "S", "attn-only", "fused", "predicted", "residual", "pred. residual", "sequential",
           "pred. sequential"});
  for (const std::string& name : names) {
    const Profile p = load_profile(name);
    for (const auto& s : summary) {
      const std::string sw = fmt::format("{}: summary", a.report);
      shape.S = field<int64_t>(s, "S", sw);
      const double att = field<double>(s, "attention_only_us", sw);
      if (!(att > 0)) continue;  // no attention-only run at this S: nothing to predict from
      const UlyssesPrediction pr =
          predict_ulysses(p, ulysses_kernel_shape(shape, emulated, 0, block_m, concurrent, att), &local);
      const double fused = s.value("fused_us", 0.0), seq = s.value("sequential_us", 0.0);
      auto pct = [&](double v) { return v > 0 ? fmt::format("{:.1f}%", 100 * (v / att - 1)) : std::string("-"); };
      // The report's own (paired, per-round) residual where it has one.
      const nlohmann::json residual = s.contains("residual_fused") ? s["residual_fused"]
                                      : fused > 0                  ? nlohmann::json(fused / att - 1)
                                                                   : nlohmann::json(nullptr);
      t.add({name, std::to_string(shape.S), format_ns(att * 1e3), fused > 0 ? format_ns(fused * 1e3) : "-",
             format_ns(pr.fused_us * 1e3),
             residual.is_number() ? fmt::format("{:.1f}%", 100 * residual.get<double>()) : std::string("-"),
             pct(pr.fused_us), seq > 0 ? format_ns(seq * 1e3) : "-", format_ns(pr.sequential_us * 1e3)});
      out.push_back({{"profile", p.name},
                     {"profile_source", name},
                     {"local_profile", local.name},
                     {"S", shape.S},
                     {"attention_only_us", att},
                     {"fused_us", fused},
                     {"sequential_us", seq},
                     {"predicted_fused_us", pr.fused_us},
                     {"predicted_sequential_us", pr.sequential_us},
                     {"residual", residual},
                     {"predicted_residual", pr.fused_us / att - 1}});
    }
  }
  switch (a.out.format()) {
    case Format::json: std::cout << nlohmann::json{{"report", a.report}, {"rows", out}}.dump(2) << "\n"; return;
    case Format::csv: std::cout << t.csv(); return;
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
