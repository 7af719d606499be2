// xstage predict: the Burst-Gap model for one (K, V, G), with both counterfactuals.
#include <cmath>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "option_checks.hpp"
#include "xstage/core/error.hpp"
#include "xstage/core/limits.hpp"
#include "xstage/core/units.hpp"
#include "xstage/model/model.hpp"

namespace xstage::cli {

namespace {
struct PredictArgs {
  std::string profile = "h200-host-pcie";
  int K = 0;
  std::string V, G;
  double bursts = 0;  // > 0 (a double: 1e15 reads as people write it): also the mean over a run of this many bursts that starts on an empty stage
  OutputFlags out;
};


constexpr double kMaxRunBursts = 1e15;

// The fields of --json and the columns of --csv (docs/cli-output.md).
const std::vector<std::string> kPredictColumns = {
    "profile", "K", "V_bytes", "gap_ns", "t0_ns", "drain_ns", "t_iss_ns", "regime", "onset_gap_ns", "gap_cap_ns",
    "stall_ns", "period_ns", "exceeds_capacity", "transient_bursts", "completion_coupled_ns", "unbounded_async_ns",
    "run_mean_t_iss_ns"};

void run_predict(const PredictArgs& a) {
  const Profile p = load_profile(a.profile);
  // The bounds the simulator has (xstage/core/limits.hpp): beyond them no GPU run
  // is described, and a typo (an extra zero, a missing unit) says so.
  if (a.K < 1 || a.K > kMaxProducers)
    throw Error(fmt::format("--K: expected a whole number in [1, {}], got {}", kMaxProducers, a.K));
  const double V = parse_size_bytes(a.V, "--V");
  const double G = parse_time_ns(a.G, "--G");
  if (V > kMaxBytes) throw Error(fmt::format("--V: '{}'; expected at most {:g} bytes", a.V, kMaxBytes));
  if (G > kMaxTimeNs) throw Error(fmt::format("--G: '{}'; expected at most {:g} ns", a.G, kMaxTimeNs));
  // A run's mean is closed-form (no simulation): bounded only where the count stops being a count.
  const long bursts = a.bursts == 0 ? 0 : whole_count(a.bursts, "--bursts", 1, kMaxRunBursts);
  for (const auto& w : range_warnings(p, a.K, V)) warn(w);
  const Prediction r = predict(p, a.K, V, G);
  const double cc = completion_coupled_ns(p, a.K, V, G);
  const double ua = unbounded_async_ns(p, a.K, V, G);
  const double run_mean = bursts > 0 ? windowed_issue_ns(p, a.K, V, G, 0, bursts) : NAN;
  if (a.out.format() != Format::table) {
    // One object for --json and one CSV row for --csv: the same fields, null
    // (an empty cell) where a value does not apply.
    const nlohmann::json j{{"profile", p.name},
                           {"K", a.K},
                           {"V_bytes", V},
                           {"gap_ns", G},
                           {"t0_ns", r.t0_ns},
                           {"drain_ns", r.drain_ns},
                           {"t_iss_ns", r.t_iss_ns},
                           {"regime", to_string(r.regime)},
                           {"onset_gap_ns", num_or_null(r.onset_gap_ns)},
                           {"gap_cap_ns", r.gap_cap_ns},
                           {"stall_ns", r.stall_ns},
                           {"period_ns", r.period_ns},
                           {"exceeds_capacity", r.exceeds_capacity},
                           {"transient_bursts", num_or_null(r.transient_bursts)},
                           {"completion_coupled_ns", cc},
                           {"unbounded_async_ns", ua},
                           {"run_mean_t_iss_ns", num_or_null(run_mean)}};
    if (a.out.format() == Format::json)
      std::cout << j.dump(2) << "\n";
    else
      std::cout << csv_of(kPredictColumns, nlohmann::json::array({j}));
    return;
  }
  Table t({"K", "V", "G", "T0_iss", "V/R", "T_iss", "regime", "onset_gap", "stall", "period",
           "coupled", "unbounded"});
  t.add({std::to_string(a.K), format_bytes(V), format_ns(G), format_ns(r.t0_ns), format_ns(V / p.R_Bps * 1e9),
         format_ns(r.t_iss_ns), to_string(r.regime), format_ns(r.onset_gap_ns), format_ns(r.stall_ns),
         format_ns(r.period_ns), format_ns(cc), format_ns(ua)});
  std::cout << fmt::format("profile {} ({}, {}): R = {}, Q = {}\n", p.name, p.transport, p.status,
                           format_rate(p.R_Bps), format_bytes(p.Q_bytes));
  std::cout << t.text();
  if (r.exceeds_capacity)
    std::cout << fmt::format("note: V exceeds what a drained stage absorbs (Q + R*(T0 - fixed)): every burst stalls, whatever the gap\n");
}
}  // namespace

void add_predict_command(CLI::App& app) {
  auto a = std::make_shared<PredictArgs>();
  auto* sub = app.add_subcommand("predict", "Burst-Gap prediction of issue time for K producers, V bytes, gap G");
  sub->add_option("--profile", a->profile, "Profile JSON file or embedded profile name")->capture_default_str();
  sub->add_option("--K", a->K, "Number of producers (CTAs) issuing the burst")->required();
  sub->add_option("--V", a->V, "Burst volume: 4096, 4e6, 2MiB, 64K ...")->required();
  sub->add_option("--G", a->G, "Gap of useful work between bursts: 250, 20us, 1.5ms ...")->required();
  sub->add_option("--bursts", a->bursts, "Also the mean issue time over a run of N bursts from an empty stage");
  add_output_flags(sub, a->out);
  sub->callback([a] { run_predict(*a); });
}

}  // namespace xstage::cli
