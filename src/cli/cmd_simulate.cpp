// xstage simulate: the event-driven X-Stage simulator on a periodic or a
// heterogeneous (CSV) schedule, next to the closed form.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "xstage/error.hpp"
#include "xstage/model.hpp"
#include "xstage/simulator.hpp"
#include "xstage/units.hpp"

namespace xstage::cli {

namespace {
struct SimulateArgs {
  std::string profile = "h200-host-pcie";
  int K = 0;
  std::string V, G, schedule, timeline, bursts_out;
  long bursts = 50;
  int show = 12;
  bool per_producer = false;
  OutputFlags out;
};

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  if (!f) throw Error(fmt::format("{}: cannot open for writing", path));
  f << text;
  if (!f) throw Error(fmt::format("{}: write failed", path));
}

void run_simulate(const SimulateArgs& a) {
  const Profile p = load_profile(a.profile);
  StageConfig cfg = stage_from_profile(p);
  cfg.per_producer_capacity = a.per_producer;
  cfg.record_timeline = !a.timeline.empty();
  std::vector<Program> progs;
  bool periodic = a.schedule.empty();
  double V = 0, G = 0;
  if (periodic) {
    if (a.K < 1) throw Error("--K: expected a whole number >= 1 (or give --schedule FILE)");
    if (a.V.empty() || a.G.empty()) throw Error("--V and --G are required without --schedule");
    if (a.bursts < 1) throw Error(fmt::format("--bursts: expected >= 1, got {}", a.bursts));
    V = parse_size_bytes(a.V, "--V");
    G = parse_time_ns(a.G, "--G");
    for (const auto& w : range_warnings(p, a.K, V)) warn(w);
    progs = periodic_programs(a.K, V, G, a.bursts);
  } else {
    progs = read_schedule_csv(a.schedule);
  }
  const SimResult r = simulate(cfg, progs);

  const long skip = a.bursts / 2;
  const double sim_steady = periodic ? steady_issue_ns(r, skip) : 0.0;
  const Prediction pr = periodic ? predict(p, a.K, V, G) : Prediction{};

  if (!a.timeline.empty()) {
    std::string s = "t_ns,occupancy_bytes,stage\n";
    for (const auto& o : r.timeline) s += fmt::format("{},{},{}\n", o.t_ns, o.bytes, o.stage);
    write_file(a.timeline, s);
  }
  std::string bursts_csv = "producer,index,start_ns,end_ns,issue_ns,bytes,stall_ns\n";
  for (const auto& b : r.bursts)
    bursts_csv += fmt::format("{},{},{},{},{},{},{}\n", b.producer, b.index, b.start_ns, b.end_ns, b.issue_ns(),
                              b.bytes, b.stall_ns);
  if (!a.bursts_out.empty()) write_file(a.bursts_out, bursts_csv);

  if (a.out.format() == Format::json) {
    nlohmann::json j{{"profile", p.name}, {"producers", progs.size()}, {"bursts", r.bursts.size()},
                     {"total_ns", r.total_ns}, {"drained_ns", r.drained_ns}, {"stalled_ns", r.stalled_ns},
                     {"max_occupancy_bytes", r.max_occupancy}, {"bytes", r.bytes}};
    if (periodic) {
      j["steady_issue_ns"] = sim_steady;
      j["model_t_iss_ns"] = pr.t_iss_ns;
      j["model_regime"] = to_string(pr.regime);
    }
    nlohmann::json spans = nlohmann::json::array();
    for (size_t i = 0; i < r.bursts.size() && i < static_cast<size_t>(std::max(a.show, 0)); ++i) {
      const auto& b = r.bursts[i];
      spans.push_back({{"producer", b.producer}, {"index", b.index}, {"start_ns", b.start_ns},
                       {"end_ns", b.end_ns}, {"bytes", b.bytes}, {"stall_ns", b.stall_ns}});
    }
    j["first_bursts"] = spans;
    std::cout << j.dump(2) << "\n";
    return;
  }
  if (a.out.format() == Format::csv) {
    std::cout << bursts_csv;
    return;
  }
  std::cout << fmt::format("profile {}: R = {}, Q = {}, {} producers, {} stage\n", p.name, format_rate(p.R_Bps),
                           format_bytes(p.Q_bytes), progs.size(), a.per_producer ? "per-producer" : "shared");
  std::cout << fmt::format("total {}  (stage drained at {}), stalled {} summed over bursts, peak occupancy {}\n",
                           format_ns(r.total_ns), format_ns(r.drained_ns), format_ns(r.stalled_ns),
                           format_bytes(r.max_occupancy));
  if (periodic && std::isfinite(pr.transient_bursts) && pr.transient_bursts >= skip)
    warn(fmt::format("the stage fills only after ~{} bursts, more than the {} skipped: the 'steady state' below is "
                     "still the transient (use more --bursts)",
                     pr.transient_bursts, skip));
  if (periodic)
    std::cout << fmt::format("steady-state issue time: simulated {}, closed form {} ({}), {:+.2f}%\n",
                             format_ns(sim_steady), format_ns(pr.t_iss_ns), to_string(pr.regime),
                             100 * (sim_steady - pr.t_iss_ns) / pr.t_iss_ns);
  Table t({"producer", "burst", "start", "end", "issue", "stall"});
  const size_t n = std::min(r.bursts.size(), static_cast<size_t>(std::max(a.show, 0)));
  for (size_t i = 0; i < n; ++i) {
    const auto& b = r.bursts[i];
    t.add({std::to_string(b.producer), std::to_string(b.index), format_ns(b.start_ns), format_ns(b.end_ns),
           format_ns(b.issue_ns()), format_ns(b.stall_ns)});
  }
  std::cout << fmt::format("first {} of {} bursts:\n", n, r.bursts.size()) << t.text();
}
}  // namespace

void add_simulate_command(CLI::App& app) {
  auto a = std::make_shared<SimulateArgs>();
  auto* sub = app.add_subcommand("simulate", "Event-driven simulation of bursts through the X-Stage");
  sub->add_option("--profile", a->profile, "Profile JSON file or embedded profile name")->capture_default_str();
  sub->add_option("--K", a->K, "Producers in lock step (periodic schedule)");
  sub->add_option("--V", a->V, "Volume of one burst over all producers");
  sub->add_option("--G", a->G, "Gap of compute after each burst");
  sub->add_option("--bursts", a->bursts, "Bursts per producer (periodic schedule)")->capture_default_str();
  sub->add_option("--schedule", a->schedule, "Heterogeneous schedule CSV: producer,kind,amount");
  sub->add_flag("--per-producer-capacity", a->per_producer, "Split Q and R statically among producers");
  sub->add_option("--timeline", a->timeline, "Write the occupancy timeline CSV here");
  sub->add_option("--bursts-out", a->bursts_out, "Write every burst span CSV here");
  sub->add_option("--show", a->show, "Bursts to print")->capture_default_str();
  add_output_flags(sub, a->out);
  sub->callback([a] { run_simulate(*a); });
}

}  // namespace xstage::cli
