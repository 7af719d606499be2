// xstage profiles: the embedded interconnect profiles, or one of them in full.
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "xstage/core/units.hpp"
#include "xstage/model/profile.hpp"

namespace xstage::cli {

namespace {
struct ProfilesArgs {
  std::string show;
  OutputFlags out;
};

void run_profiles(const ProfilesArgs& a) {
  std::vector<Profile> shown;
  if (!a.show.empty()) {
    const Profile p = load_profile(a.show);
    if (a.out.format() != Format::csv) {  // one profile in full: JSON for people and programs alike
      std::cout << to_json(p).dump(2) << "\n";
      return;
    }
    shown.push_back(p);
  }
  const auto& all = a.show.empty() ? embedded_profiles() : shown;
  if (a.out.format() == Format::json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& p : all) j.push_back(to_json(p));
    std::cout << j.dump(2) << "\n";
    return;
  }
  if (a.out.format() == Format::csv) {
    // Every field of a profile in base units; an extension a profile does not have is an empty cell.
    const nlohmann::json none;
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& p : all)
      rows.push_back({{"name", p.name},
                      {"transport", p.transport},
                      {"status", p.status},
                      {"R_Bps", p.R_Bps},
                      {"Q_bytes", p.Q_bytes},
                      {"Q_fill_bytes", p.fill_capacity()},
                      {"Q_cold_bytes", p.has_cold_start() ? nlohmann::json(p.Q_cold_bytes) : none},
                      {"Q_warm_per_byte", p.has_cold_start() ? nlohmann::json(p.Q_warm_per_byte) : none},
                      {"fixed_ns", p.t0.fixed_ns},
                      {"per_producer_Bps", p.t0.per_producer_Bps},
                      {"aggregate_Bps", p.t0.aggregate_Bps},
                      {"near_bytes", p.t0.has_near() ? nlohmann::json(p.t0.near_bytes) : none},
                      {"near_per_producer_Bps", p.t0.has_near() ? nlohmann::json(p.t0.near_per_producer_Bps) : none},
                      {"latency_ns", p.latency_ns}});
    std::cout << csv_of({"name", "transport", "status", "R_Bps", "Q_bytes", "Q_fill_bytes", "Q_cold_bytes",
                         "Q_warm_per_byte", "fixed_ns", "per_producer_Bps", "aggregate_Bps", "near_bytes",
                         "near_per_producer_Bps", "latency_ns"},
                        rows);
    return;
  }
  Table t({"name", "transport", "status", "R", "Q", "T0 fixed", "T0 per-producer", "T0 aggregate", "T0 near queue",
           "latency"});
  for (const auto& p : all)
    t.add({p.name, p.transport, p.status, format_rate(p.R_Bps), format_bytes(p.Q_bytes), format_ns(p.t0.fixed_ns),
           format_rate(p.t0.per_producer_Bps), format_rate(p.t0.aggregate_Bps),
           p.t0.has_near() ? format_bytes(p.t0.near_bytes) + " at " + format_rate(p.t0.near_per_producer_Bps) : "-",
           format_ns(p.latency_ns)});
  std::cout << t.text();
  if (a.out.format() == Format::table)
    std::cout << fmt::format("default: {}  (xstage profiles --show NAME prints one in full)\n", default_profile().name);
}
}  // namespace

void add_profiles_command(CLI::App& app) {
  auto a = std::make_shared<ProfilesArgs>();
  auto* sub = app.add_subcommand("profiles", "List the embedded interconnect profiles");
  sub->add_option("--show", a->show, "Print one profile (embedded name or JSON file) in full");
  add_output_flags(sub, a->out);
  sub->callback([a] { run_profiles(*a); });
}

}  // namespace xstage::cli
