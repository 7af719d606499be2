// xstage visible: when device-initiated stores become visible at the far end
// of the X-Stage, per burst, next to the Burst-Gap model's drain
// (harness/visible/visible.hpp; docs/model.md, section 7). Here the options, the
// tables and the files.
#include <cmath>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "harness/visible/visible.hpp"
#include "util/output_file.hpp"
#include "util/replace_file.hpp"
#include "xstage/core/build_info.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/core/units.hpp"

namespace xstage::cli {

namespace {

struct VisibleArgs {
  std::string paths = "host";
  int device = 0;
  std::vector<int> K{132};
  std::vector<std::string> V{"1MiB"}, G{"0"};
  int warps = 8;
  int bursts = 0;  // 0: enough to store 1.5 x the profile's Q
  std::string profile;  // default: the path's embedded H200 profile
  int calib_rounds = 2000;
  std::string timeout = "10s";
  std::string dst_size = "256MiB";
  std::string out_dir;
  std::string markers = "fenced";
  OutputFlags out;
};

struct Planned {
  VisiblePoint point;
  Profile profile;
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t c = s.find(',', pos);
    out.push_back(s.substr(pos, c == std::string::npos ? std::string::npos : c - pos));
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return out;
}

// Bursts that store 1.5 Q in all (so the stage fills past its fitted capacity), at least 8.
int auto_bursts(double Q_bytes, double V_bytes, int K) {
  const double n = std::ceil(1.5 * Q_bytes / V_bytes);
  const double cap = std::min<double>(1024, double(1u << 20) / K);
  return static_cast<int>(std::clamp(n, 8.0, std::max(1.0, cap)));
}

// Every point, checked, before any GPU work.
std::vector<Planned> plan(const VisibleArgs& a) {
  std::vector<Planned> out;
  for (const auto& name : split_commas(a.paths)) {
    const VisiblePath path = parse_visible_path(name);
    Profile prof = load_profile(a.profile.empty() ? default_profile_name(path) : a.profile);
    for (int K : a.K)
      for (const auto& v : a.V)
        for (const auto& g : a.G) {
          VisiblePoint p;
          p.path = path;
          p.device = a.device;
          p.K = K;
          p.warps = a.warps;
          p.V_bytes = parse_size_bytes(v, "--V");
          p.gap_ns = parse_time_ns(g, "--G");
          p.calib_rounds = a.calib_rounds;
          p.fenced_markers = a.markers == "fenced";
          p.timeout_ns = parse_time_ns(a.timeout, "--timeout", false);
          p.dst_bytes = parse_size_bytes(a.dst_size, "--dst-size");
          if (a.bursts < 0) throw Error(fmt::format("--bursts: {}; expected >= 1, or 0 for automatic", a.bursts));
          p.bursts = a.bursts > 0 ? a.bursts : auto_bursts(prof.Q_bytes, p.V_bytes, std::max(K, 1));
          validate(p);
          out.push_back({p, prof});
        }
  }
  return out;
}


nlohmann::json clock_json(const ClockOffset& c) {
  return {{"offset_ns", num_or_null(c.offset_ns)}, {"error_ns", num_or_null(c.error_ns)}, {"rtt_ns", num_or_null(c.rtt_ns)},
          {"at_ns", num_or_null(c.at_ns)}, {"rounds", c.rounds}};
}

nlohmann::json report_json(const VisibleReport& r) {
  const VisibleTrace& t = r.trace;
  const VisiblePoint& p = t.point;
  nlohmann::json bursts = nlohmann::json::array(), timeline = nlohmann::json::array();
  for (const VisibleBurst& b : r.bursts)
    bursts.push_back({{"burst", b.burst}, {"issue_start_ns", num_or_null(b.issue_start_ns)},
                      {"issue_end_ns", num_or_null(b.issue_end_ns)}, {"fence_end_ns", num_or_null(b.fence_end_ns)},
                      {"first_visible_ns", num_or_null(b.first_visible_ns)}, {"visible_ns", num_or_null(b.visible_ns)},
                      {"bytes_issued", num_or_null(b.bytes_issued)}, {"bytes_visible", num_or_null(b.bytes_visible)},
                      {"occupancy_bytes", num_or_null(b.occupancy_bytes)}, {"drain_ns", num_or_null(b.drain_ns)},
                      {"model_visible_ns", num_or_null(b.model_visible_ns)},
                      {"model_occupancy_bytes", num_or_null(b.model_occupancy_bytes)},
                      {"sim_issue_start_ns", num_or_null(b.sim_issue_start_ns)}, {"sim_issue_end_ns", num_or_null(b.sim_issue_end_ns)},
                      {"sim_visible_ns", num_or_null(b.sim_visible_ns)}, {"sim_occupancy_bytes", num_or_null(b.sim_occupancy_bytes)}});
  for (const VisibleSample& s : r.timeline)
    timeline.push_back({{"t_ns", num_or_null(s.t_ns)}, {"occupancy_bytes", num_or_null(s.occupancy_bytes)},
                        {"model_occupancy_bytes", num_or_null(s.model_occupancy_bytes)},
                        {"sim_occupancy_bytes", num_or_null(s.sim_occupancy_bytes)}});
  return {{"path", to_string(p.path)},
          {"device", p.device},
          {"observer", t.observer},
          {"K", p.K},
          {"warps", p.warps},
          {"V_bytes", t.V_bytes},
          {"chunk_bytes", t.chunk_bytes},
          {"gap_ns", p.gap_ns},
          {"burst_count", p.bursts},
          {"markers", p.fenced_markers ? "fenced" : "relaxed"},
          {"clock",
           {{"timer_resolution_ns", num_or_null(t.timer_resolution_ns)},
            {"observer_resolution_ns", num_or_null(t.observer_resolution_ns)},
            {"poll_interval_ns", num_or_null(t.poll_interval_ns)},
            {"before", p.path == VisiblePath::local ? nlohmann::json(nullptr) : clock_json(t.clock.before)},
            {"after", p.path == VisiblePath::local ? nlohmann::json(nullptr) : clock_json(t.clock.after)},
            {"error_ns", num_or_null(t.clock.error_ns())},
            {"drift_ppm", p.path == VisiblePath::local ? nlohmann::json(nullptr) : num_or_null(t.clock.drift_ppm())},
            {"tolerance_ns", num_or_null(r.tolerance_ns)}}},
          {"profile", {{"name", r.profile_name}, {"R_Bps", r.R_Bps}, {"Q_bytes", r.Q_bytes}, {"latency_ns", r.latency_ns}}},
          {"summary",
           {{"max_occupancy_bytes", r.max_occupancy_bytes},
            {"max_occupancy_burst", r.max_occupancy_burst},
            {"model_max_occupancy_bytes", r.model_max_occupancy_bytes},
            {"sim_max_occupancy_bytes", r.sim_max_occupancy_bytes},
            {"min_occupancy_bytes_within_tolerance", num_or_null(r.min_occupancy_bytes)},
            {"issue_rate_Bps", num_or_null(r.issue_rate_Bps)},
            {"visible_rate_Bps", num_or_null(r.visible_rate_Bps)},
            {"markers_seen", t.markers_seen},
            {"markers_expected", uint64_t(p.K) * p.bursts},
            {"early_markers", r.early_markers},
            {"data_mismatches", t.data_mismatches},
            {"destination_mismatches", t.destination_mismatches},
            {"checked_words", t.checked_words}}},
          {"bursts", bursts},
          {"timeline", timeline}};
}

const std::vector<std::string> kCsvHeader = {
    "path", "K", "V_bytes", "gap_ns", "burst", "issue_start_ns", "issue_end_ns", "fence_end_ns", "first_visible_ns",
    "visible_ns", "bytes_issued", "bytes_visible", "occupancy_bytes", "drain_ns", "model_visible_ns",
    "model_occupancy_bytes", "sim_issue_start_ns", "sim_issue_end_ns", "sim_visible_ns", "sim_occupancy_bytes"};

std::string cell(double v) { return std::isfinite(v) ? fmt::format("{}", v) : std::string(); }

void add_csv_rows(Table& t, const VisibleReport& r) {
  const VisiblePoint& p = r.trace.point;
  for (const VisibleBurst& b : r.bursts)
    t.add({to_string(p.path), std::to_string(p.K), cell(r.trace.V_bytes), cell(p.gap_ns), std::to_string(b.burst),
           cell(b.issue_start_ns), cell(b.issue_end_ns), cell(b.fence_end_ns), cell(b.first_visible_ns),
           cell(b.visible_ns), cell(b.bytes_issued), cell(b.bytes_visible), cell(b.occupancy_bytes), cell(b.drain_ns),
           cell(b.model_visible_ns), cell(b.model_occupancy_bytes), cell(b.sim_issue_start_ns),
           cell(b.sim_issue_end_ns), cell(b.sim_visible_ns), cell(b.sim_occupancy_bytes)});
}

std::string us(double ns) { return std::isfinite(ns) ? fmt::format("{:.2f}", ns * 1e-3) : std::string("-"); }
std::string mib(double b) { return std::isfinite(b) ? fmt::format("{:.2f}", b / double(1 << 20)) : std::string("-"); }

void print_text(const VisibleReport& r) {
  const VisibleTrace& t = r.trace;
  const VisiblePoint& p = t.point;
  std::cout << fmt::format("\n== {} path: K = {}, V = {}, G = {}, {} bursts, {} markers; observer: {} ==\n",
                           to_string(p.path), p.K, format_bytes(t.V_bytes), format_ns(p.gap_ns), p.bursts,
                           p.fenced_markers ? "fenced" : "relaxed", t.observer);
  std::cout << fmt::format(
      "clocks: %globaltimer step {} (observer {}), observer -> GPU {} offset error +-{} (drift {:.2f} ppm), "
      "poll interval up to {}; tolerance {}\n",
      format_ns(t.timer_resolution_ns), format_ns(t.observer_resolution_ns), p.device, format_ns(t.clock.error_ns()),
      t.clock.drift_ppm(), format_ns(t.poll_interval_ns), format_ns(r.tolerance_ns));
  if (t.timer_resolution_ns >= 500)
    std::cout << "note: %globaltimer ticks coarsely here: issue spans shorter than a step are not resolved\n";
  std::cout << fmt::format(
      "measured: max occupancy {} (burst {}), issue {} , visible {}; model ({}): R = {}, Q = {}, max occupancy {} "
      "(measured issue) / {} (simulated)\n",
      format_bytes(r.max_occupancy_bytes), r.max_occupancy_burst, format_rate(r.issue_rate_Bps),
      format_rate(r.visible_rate_Bps), r.profile_name, format_rate(r.R_Bps), format_bytes(r.Q_bytes),
      format_bytes(r.model_max_occupancy_bytes), format_bytes(r.sim_max_occupancy_bytes));
  Table tab({"burst", "issue start us", "issue end us", "visible us", "issued MiB", "visible MiB", "occupancy MiB",
             "model visible us", "model occ MiB", "sim visible us", "sim occ MiB"});
  const size_t n = r.bursts.size();
  const size_t step = n > 40 ? (n + 31) / 32 : 1;
  for (size_t i = 0; i < n; ++i) {
    if (i % step != 0 && i + 1 != n) continue;
    const VisibleBurst& b = r.bursts[i];
    tab.add({std::to_string(b.burst), us(b.issue_start_ns), us(b.issue_end_ns), us(b.visible_ns), mib(b.bytes_issued),
             mib(b.bytes_visible), mib(b.occupancy_bytes), us(b.model_visible_ns), mib(b.model_occupancy_bytes),
             us(b.sim_visible_ns), mib(b.sim_occupancy_bytes)});
  }
  std::cout << tab.text();
  if (step > 1) std::cout << fmt::format("(every {}th burst and the last; --csv or -o for all)\n", step);
}

std::string point_stem(const VisiblePoint& p, double V) {
  return fmt::format("visible-{}-K{}-V{:.0f}-G{:.0f}{}", to_string(p.path), p.K, V, p.gap_ns,
                     p.fenced_markers ? "" : "-relaxed");
}

void run_visible(const VisibleArgs& a) {
  const std::vector<Planned> points = plan(a);
  if (!a.out_dir.empty()) detail::prepare_output_dir(a.out_dir, "-o", "visible.json");
  if (cuda_device_count() == 0) throw Error("visible: no CUDA GPU is visible to this process; expected a machine with a GPU");
  const DeviceInfo dev = device_info(a.device);
  nlohmann::json all = nlohmann::json::array();
  Table csv(kCsvHeader);
  std::vector<std::string> failures;
  std::unique_ptr<VisibleRunner> runner;  // one per path: buffers and timer readings are kept across points
  VisiblePath runner_path = VisiblePath::host;
  for (const Planned& pl : points) {
    const VisiblePoint& p = pl.point;
    if (!runner || p.path != runner_path) {
      runner.reset();
      runner = std::make_unique<VisibleRunner>(p);
      runner_path = p.path;
    }
    const VisibleReport r = analyse_visible(runner->run(p), pl.profile);
    nlohmann::json j = report_json(r);
    j["commit"] = build_commit();  // each point's file names its commit (results/README.md)
    if (!a.out_dir.empty()) {
      const std::string stem = a.out_dir + "/" + point_stem(p, r.trace.V_bytes);
      detail::write_file_replacing(stem + ".json", j.dump(1) + "\n");
      Table one(kCsvHeader);
      add_csv_rows(one, r);
      detail::write_file_replacing(stem + ".csv", one.csv());
    }
    all.push_back(j);
    add_csv_rows(csv, r);
    if (a.out.format() == Format::table) print_text(r);
    const std::string where = fmt::format("{} K={} V={} G={}", to_string(p.path), p.K, r.trace.V_bytes, p.gap_ns);
    if (r.trace.data_mismatches && p.fenced_markers)
      failures.push_back(fmt::format("{}: {} markers were seen before their chunk's data", where,
                                     r.trace.data_mismatches));
    else if (r.trace.data_mismatches)
      std::cerr << fmt::format("note: {}: {} of {} relaxed markers arrived before their chunk's last data word: "
                               "those bursts' visible times are early\n",
                               where, r.trace.data_mismatches, r.trace.markers_seen);
    if (r.trace.destination_mismatches)
      failures.push_back(fmt::format("{}: destination check: {} of {} words differ", where,
                                     r.trace.destination_mismatches, r.trace.checked_words));
    if (r.early_markers)
      warn(fmt::format("{}: {} markers seen before their producer's fence returned (beyond the {} tolerance)", where,
                       r.early_markers, format_ns(r.tolerance_ns)));
    if (r.min_occupancy_bytes < 0)
      warn(fmt::format("{}: occupancy below zero by {} even with the tolerance", where,
                       format_bytes(-r.min_occupancy_bytes)));
  }
  nlohmann::json doc{{"command", command_line()}, {"commit", build_commit()}, {"date", utc_now_iso()},
                     {"device", dev.name}, {"driver", dev.driver}, {"points", all}};
  if (!a.out_dir.empty()) detail::write_file_replacing(a.out_dir + "/visible.json", doc.dump(1) + "\n");
  if (a.out.format() == Format::json) std::cout << doc.dump(1) << "\n";
  if (a.out.format() == Format::csv) std::cout << csv.csv();
  if (!failures.empty()) {
    std::string msg = "visible: the checks failed:";
    for (const auto& f : failures) msg += "\n  " + f;
    throw Error(msg + "\n; expected every check to pass (each line above says what it measured)");
  }
}

}  // namespace

void add_visible_command(CLI::App& app) {
  auto a = std::make_shared<VisibleArgs>();
  auto* sub = app.add_subcommand(
      "visible", "Time when each burst of device-initiated stores becomes visible at the far end; stage occupancy");
  sub->add_option("--path", a->paths, "host (CPU polls), peer (GPU device+1 polls) or local; a comma list")
      ->capture_default_str();
  sub->add_option("--device", a->device, "CUDA device of the producers")->capture_default_str();
  sub->add_option("--K", a->K, "Producers (CTAs), a list")->delimiter(',')->capture_default_str();
  sub->add_option("--V", a->V, "Burst volumes, a list (1MiB,8MiB)")->delimiter(',')->capture_default_str();
  sub->add_option("--G", a->G, "Gaps after each burst, a list (0,20us)")->delimiter(',')->capture_default_str();
  sub->add_option("--warps", a->warps, "Warps per producer")->capture_default_str();
  sub->add_option("--bursts", a->bursts, "Bursts per point (0: enough to store 1.5 x the profile's Q)")
      ->capture_default_str();
  sub->add_option("--profile", a->profile, "Profile for the model's view (default: h200-host-pcie, h200-peer, h200-local)");
  sub->add_option("--calib-rounds", a->calib_rounds, "Ping-pong rounds per clock calibration")->capture_default_str();
  sub->add_option("--timeout", a->timeout, "Longest wait for any marker or ping")->capture_default_str();
  sub->add_option("--dst-size", a->dst_size, "Destination buffer; bursts rotate through it")->capture_default_str();
  sub->add_option("--markers", a->markers,
                  "fenced (a system-scope release fence before each CTA's marker: ordered, but the fence waits for "
                  "the drain) or relaxed (no fence: the stage fills; markers may overtake their data)")
      ->check(CLI::IsMember({"fenced", "relaxed"}))
      ->capture_default_str();
  sub->add_option("-o,--out-dir", a->out_dir, "Folder for visible.json and one JSON + CSV per point");
  add_output_flags(sub, a->out);
  sub->callback([a] { run_visible(*a); });
}

}  // namespace xstage::cli
