// xstage simulate: the event-driven X-Stage simulator on a periodic or a
// heterogeneous (CSV) schedule, next to the closed form.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "option_checks.hpp"
#include "progress.hpp"
#include "util/output_file.hpp"
#include "xstage/core/error.hpp"
#include "xstage/core/limits.hpp"
#include "xstage/core/units.hpp"
#include "xstage/model/model.hpp"
#include "xstage/model/simulator.hpp"

namespace xstage::cli {

namespace {
struct SimulateArgs {
  std::string profile = "h200-host-pcie";
  int K = 0;
  std::string V, G, stagger, schedule, timeline, bursts_out;
  double bursts = 50;  // a double, so that 1e6 reads as people write it (whole_count checks it)
  int show = 12;
  bool per_producer = false;
  OutputFlags out;
};

// Bursts the table and --json list (the first ones, held in memory): far
// more than a terminal shows, and a bound on what is kept.
constexpr int kMaxShownBursts = 100000;

constexpr const char* kBurstsCsvHeader = "producer,index,start_ns,end_ns,issue_ns,bytes,stall_ns\n";

std::string burst_csv_row(const BurstSpan& b) {
  return fmt::format("{},{},{},{},{},{},{}\n", b.producer, b.index, b.start_ns, b.end_ns, b.issue_ns(), b.bytes,
                     b.stall_ns);
}

// The simulator's own error ("simulate: producer 0 computes ... ns") told
// as the options or the file the user gave.
[[noreturn]] void rethrow_as_input(const Error& e, const std::string& input) {
  std::string m = e.what();
  for (const char* internal : {"simulate: ", "staggered_programs: ", "periodic_programs: "})
    if (m.rfind(internal, 0) == 0) m.erase(0, std::string(internal).size());
  if (m.find("expected") == std::string::npos) m += "; expected a run within the simulator's bounds (docs/robustness.md)";
  throw Error(fmt::format("{}: {}", input, m));  // m ends in "; expected ..." (above)
}

void run_simulate(const SimulateArgs& a, const CLI::App& sub) {
  const bool periodic = a.schedule.empty();
  if (!periodic)
    refuse_unused(sub, {"--K", "--V", "--G", "--bursts", "--stagger"}, "with --schedule (the file gives the bursts)");
  if (a.show < 0 || a.show > kMaxShownBursts)
    throw Error(fmt::format("--show {}: too many bursts to keep; expected 0 .. {} (--bursts-out FILE writes them all)", a.show,
                            kMaxShownBursts));
  // Output files are checked before any work (reading the schedule
  // included): none may be an input, nor the file of another output.
  const std::vector<std::string> inputs = {a.schedule, a.profile};
  detail::check_outputs({{a.timeline, a.timeline.empty() ? "" : "--timeline"},
                         {a.bursts_out, a.bursts_out.empty() ? "" : "--bursts-out"}},
                        inputs);
  const Profile p = load_profile(a.profile);
  StageConfig cfg = stage_from_profile(p);
  cfg.per_producer_capacity = a.per_producer;
  cfg.record_timeline = !a.timeline.empty();
  std::vector<Program> progs;
  double V = 0, G = 0;
  long bursts = 0;
  std::string input = a.schedule;
  if (periodic) {
    if (a.K < 1 || a.K > kMaxProducers)
      throw Error(fmt::format("--K: expected a whole number in [1, {}] (or give --schedule FILE), got {}",
                              kMaxProducers, a.K));
    if (a.V.empty() || a.G.empty()) throw Error("--V and --G are required without --schedule; expected both, or --schedule FILE");
    bursts = whole_count(a.bursts, "--bursts", 1, 1e15);  // the product with --K is the bound
    if (double(a.K) * double(bursts) > kMaxSimulatedBursts)
      throw Error(fmt::format("--K x --bursts: {} x {} bursts; expected at most {:g} simulated bursts", a.K, bursts,
                              kMaxSimulatedBursts));
    V = parse_size_bytes(a.V, "--V");
    G = parse_time_ns(a.G, "--G");
    if (V > kMaxBytes) throw Error(fmt::format("--V: '{}'; expected at most {:g} bytes", a.V, kMaxBytes));
    if (G > kMaxTimeNs) throw Error(fmt::format("--G: '{}'; expected at most {:g} ns", a.G, kMaxTimeNs));
    for (const auto& w : range_warnings(p, a.K, V)) warn(w);
    input = fmt::format("--K {} --V {} --G {} --bursts {}", a.K, a.V, a.G, bursts);
    if (!a.stagger.empty()) {
      const double spread = parse_time_ns(a.stagger, "--stagger");
      input += " --stagger " + a.stagger;
      try {
        progs = staggered_programs(a.K, V, G, bursts, spread);
      } catch (const Error& e) {
        rethrow_as_input(e, input);
      }
    } else {
      progs = periodic_programs(a.K, V, G, bursts);
    }
  } else {
    progs = read_schedule_csv(a.schedule);
  }
  // Output files are written as the bursts stream by: nothing the size of
  // the run is held in memory.
  std::optional<detail::OutputFile> timeline, bursts_out;
  if (!a.timeline.empty()) {
    timeline.emplace(a.timeline, "--timeline", inputs);
    timeline->stream() << "t_ns,occupancy_bytes,stage\n";
  }
  if (!a.bursts_out.empty()) {
    bursts_out.emplace(a.bursts_out, "--bursts-out", inputs);
    bursts_out->stream() << kBurstsCsvHeader;
  }
  const long skip = periodic ? bursts / 2 : 0;
  SteadyIssueTracker steady(progs.size(), skip);
  std::vector<BurstSpan> first;
  const bool csv = a.out.format() == Format::csv;
  if (csv) std::cout << kBurstsCsvHeader;
  ProgressLine progress("simulate");
  SimObserver obs;
  obs.on_burst = [&](const BurstSpan& b) {
    if (periodic) steady.add(b);
    if (first.size() < static_cast<size_t>(a.show)) first.push_back(b);
    if (bursts_out) bursts_out->stream() << burst_csv_row(b);
    if (csv) std::cout << burst_csv_row(b);
  };
  if (timeline)
    obs.on_sample = [&](const OccupancySample& o) {
      timeline->stream() << fmt::format("{},{},{}\n", o.t_ns, o.bytes, o.stage);
    };
  obs.on_progress = [&](double f) { progress.update(f); };
  SimResult r;
  try {
    r = simulate(cfg, progs, obs);
  } catch (const Error& e) {
    rethrow_as_input(e, input);
  }
  progress.done();
  if (timeline) timeline->commit();
  if (bursts_out) bursts_out->commit();
  if (csv) return;

  const double sim_steady = periodic ? steady.median() : 0.0;
  const Prediction pr = periodic ? predict(p, a.K, V, G) : Prediction{};

  if (a.out.format() == Format::json) {
    // The same keys on every run (docs/cli-output.md): null where a value does not apply.
    const nlohmann::json none;
    nlohmann::json j{{"profile", p.name}, {"producers", progs.size()}, {"bursts", r.burst_count},
                     {"total_ns", r.total_ns}, {"drained_ns", r.drained_ns}, {"stalled_ns", r.stalled_ns},
                     {"max_occupancy_bytes", r.max_occupancy}, {"bytes", r.bytes},
                     {"steady_issue_ns", periodic ? nlohmann::json(sim_steady) : none},
                     {"model_t_iss_ns", periodic ? nlohmann::json(pr.t_iss_ns) : none},
                     {"model_regime", periodic ? nlohmann::json(to_string(pr.regime)) : none}};
    nlohmann::json spans = nlohmann::json::array();
    for (const auto& b : first)
      spans.push_back({{"producer", b.producer}, {"index", b.index}, {"start_ns", b.start_ns}, {"end_ns", b.end_ns},
                       {"issue_ns", b.issue_ns()}, {"bytes", b.bytes}, {"stall_ns", b.stall_ns}});
    j["first_bursts"] = spans;
    std::cout << j.dump(2) << "\n";
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
  for (const auto& b : first)
    t.add({std::to_string(b.producer), std::to_string(b.index), format_ns(b.start_ns), format_ns(b.end_ns),
           format_ns(b.issue_ns()), format_ns(b.stall_ns)});
  std::cout << fmt::format("first {} of {} bursts:\n", first.size(), r.burst_count) << t.text();
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
  sub->add_option("--stagger", a->stagger,
                  "Periodic schedule: producer k starts k / (K - 1) of this late (the probe's --stagger)");
  sub->add_option("--schedule", a->schedule, "Heterogeneous schedule CSV: producer,kind,amount");
  sub->add_flag("--per-producer-capacity", a->per_producer, "Split Q and R statically among producers");
  sub->add_option("--timeline", a->timeline, "Write the occupancy timeline CSV here");
  sub->add_option("--bursts-out", a->bursts_out, "Write every burst span CSV here");
  sub->add_option("--show", a->show, "Bursts to print")->capture_default_str();
  add_output_flags(sub, a->out);
  sub->callback([a, sub] { run_simulate(*a, *sub); });
}

}  // namespace xstage::cli
