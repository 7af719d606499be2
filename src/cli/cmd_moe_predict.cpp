// xstage moe-predict: the model's prediction of the fused MoE layer per
// scheduler, on the CPU: a recorded sweep re-predicted (against its
// measurements), one configuration, or the issue's grid with each
// configuration's regime (docs/design/moe-model.md).
#include <cmath>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "option_checks.hpp"
#include "xstage/core/error.hpp"
#include "xstage/core/units.hpp"
#include "xstage/moe/moe_prediction.hpp"
#include "xstage/moe/moe_sweep_record.hpp"

namespace xstage::cli {

namespace {

struct MoePredictArgs {
  std::string sweep;
  std::string profile;  // "": the sweep's, else the path's default
  std::string shape;
  int tokens = 0, P = 0, sms = 132;
  std::string placement = "host", backend = "emulated", routing = "uniform", tile = "auto";
  double compute_only_ms = 0;  // one configuration: the measured compute-only time of the fused kernel
  bool grid = false;
  double tie = 0.03;  // schedulers closer than this (measured) are not a resolved pair
  OutputFlags out;
};

// The columns of --csv (docs/cli-output.md): one row per configuration and scheduler.
const std::vector<std::string> kCsvColumns = {"shape",       "tokens",     "P",         "backend",     "placement",
                                              "routing",     "block_m",    "profile",   "regime",      "rho",
                                              "excess_bytes", "mean_rate", "scheduler", "measured_ms", "predicted_ms",
                                              "error",       "experts_ms", "stalled_ms"};

// A shape as the table and the CSV name it: its name, or hidden/inter/experts/topk
// for a shape given by its sizes (their name, "custom", would not tell them apart).
std::string shape_label(const MoeShape& s) {
  if (s.name != "custom") return s.name;
  return fmt::format("{}/{}/{}/{}", s.hidden, s.inter, s.experts, s.topk);
}

constexpr MoeSchedule kSchedules[] = {MoeSchedule::expert_wave, MoeSchedule::interleaved, MoeSchedule::model_guided};

// The issue's grid: six shapes x T {256 .. 16K} x P {2, 4} (one rank a GPU: P = 2, two GPUs).
std::vector<MoeConfig> grid_configs(const MoePredictArgs& a) {
  std::vector<MoeConfig> out;
  for (const MoeShape& s : moe_prediction_shapes())
    for (int T = 256; T <= 16384; T *= 2)
      for (int P : {2, 4}) {
        if (a.backend != "emulated" && P != 2) continue;
        MoeConfig c;
        c.shape = s;
        c.tokens = T;
        c.P = P;
        c.backend = a.backend;
        c.placement = a.placement;
        c.routing = a.routing;
        c.sms = a.sms;
        out.push_back(c);
      }
  return out;
}

MoeTile tile_of(const std::string& t) {
  if (t == "auto") return MoeTile::automatic;
  if (t == "m128n256") return MoeTile::m128n256;
  if (t == "m64n256") return MoeTile::m64n256;
  throw Error(fmt::format("--tile \"{}\": expected auto, m128n256 or m64n256", t));
}

std::string path_of(const MoeConfig& c) { return c.emulated() ? "emulated/" + c.placement : c.backend; }

std::string ms_text(double ms) { return std::isfinite(ms) ? fmt::format("{:.3f}", ms) : std::string("-"); }
std::string pct(double v) { return std::isfinite(v) ? fmt::format("{:+.1f}%", 100 * v) : std::string("-"); }

nlohmann::json plan_json(const MoeSchedulePlan& p) {
  return {{"schedule", moe_schedule_name(p.schedule)},
          {"wave_tiles", p.wave_tiles},
          {"l2_share", p.l2_share},
          {"lag_tiles", p.lag_tiles}};
}

struct Row {
  MoeConfig config;
  MoeConfigPrediction pred;
  std::string profile, compute_source;
  std::map<MoeSchedule, double> measured_ms;  // medians (NaN: not measured)
  // The median over rounds of each round's expert-wave / interleaved time
  // (NaN: not measured, or rounds not paired one to one).
  double paired_ew_over_il = NAN;
  std::map<MoeSchedule, std::map<std::string, double>> measured_phase_ms;  // dispatch, experts, combine (medians)
};

constexpr const char* kPhases[] = {"dispatch", "experts", "combine"};
double predicted_phase_ms(const MoeLayerPrediction& p, const std::string& phase) {
  return 1e-6 * (phase == "dispatch" ? p.dispatch_ns : phase == "experts" ? p.experts_ns : p.combine_ns);
}
double measured_phase(const Row& r, MoeSchedule s, const std::string& phase) {
  auto it = r.measured_phase_ms.find(s);
  if (it == r.measured_phase_ms.end()) return NAN;
  auto p = it->second.find(phase);
  return p == it->second.end() ? NAN : p->second;
}

// Which of expert-wave and interleaved is faster: -1 expert-wave, +1
// interleaved, 0 within `tie` of each other (or not measured).
int faster(double ew, double il, double tie) {
  if (!std::isfinite(ew) || !std::isfinite(il)) return 0;
  if (std::abs(ew - il) <= tie * std::min(ew, il)) return 0;
  return ew < il ? -1 : 1;
}
const char* faster_name(int f) { return f < 0 ? "expert-wave" : f > 0 ? "interleaved" : "tie"; }

// A schedule's measured median (NaN: not measured).
double measured_of(const Row& r, MoeSchedule s) { return r.measured_ms.count(s) ? r.measured_ms.at(s) : NAN; }
// Median over rounds of round i's time of `a` over that of `b`; NaN unless
// both were timed in the same rounds (equal counts, no round of either
// skipped, every time positive).
double paired_ratio(const RecordedMoeConfig& rc, const std::string& a, const std::string& b) {
  auto x = rc.ms.find(a), y = rc.ms.find(b);
  if (x == rc.ms.end() || y == rc.ms.end() || x->second.empty() || x->second.size() != y->second.size()) return NAN;
  for (const std::string* k : {&a, &b}) {
    auto sk = rc.ms_skipped.find(*k);
    if (sk != rc.ms_skipped.end() && sk->second > 0) return NAN;
  }
  std::vector<double> q;
  for (size_t i = 0; i < x->second.size(); ++i) {
    if (!(x->second[i] > 0) || !(y->second[i] > 0)) return NAN;
    q.push_back(x->second[i] / y->second[i]);
  }
  return moe_median(q);
}
// The measured faster of the two, by paired rounds where the sweep has them:
// each round runs every variant in turn, so a round's EW / IL compares times
// taken at about the same SM clock, while the ratio of the two medians can
// set a round of one at one clock against a round of the other at another
// (the power cap moves the clock by 10-20% between rounds of one
// configuration). Without paired rounds, the medians.
int faster_measured(const Row& r, double tie) {
  const double p = r.paired_ew_over_il;
  if (std::isfinite(p) && p > 0) return faster(p, 1.0, tie);
  return faster(measured_of(r, MoeSchedule::expert_wave), measured_of(r, MoeSchedule::interleaved), tie);
}

nlohmann::json row_json(const Row& r, double tie) {
  nlohmann::json sch = nlohmann::json::object();
  for (MoeSchedule s : kSchedules) {
    const MoeLayerPrediction& p = r.pred.schedulers.at(s);
    const double m = r.measured_ms.count(s) ? r.measured_ms.at(s) : NAN;
    nlohmann::json measured_phases = nlohmann::json::object();
    for (const char* ph : kPhases) measured_phases[ph] = num_or_null(measured_phase(r, s, ph));
    sch[moe_schedule_name(s)] = {{"measured_ms", num_or_null(m)},
                                 {"predicted_ms", p.total_ns() * 1e-6},
                                 {"error", num_or_null((p.total_ns() * 1e-6 - m) / m)},
                                 {"dispatch_ms", p.dispatch_ns * 1e-6},
                                 {"experts_ms", p.experts_ns * 1e-6},
                                 {"combine_ms", p.combine_ns * 1e-6},
                                 {"measured_phase_ms", measured_phases},
                                 {"stalled_ms", p.stalled_ns * 1e-6},
                                 {"rows_wait_ms", p.rows_wait_ns * 1e-6},
                                 {"plan", plan_json(p.plan)}};
  }
  auto get = [&](MoeSchedule s) { return measured_of(r, s); };
  const int fm = faster_measured(r, tie);
  const int fp = faster(r.pred.schedulers.at(MoeSchedule::expert_wave).total_ns(),
                        r.pred.schedulers.at(MoeSchedule::interleaved).total_ns(), 0);
  const double ew = get(MoeSchedule::expert_wave), il = get(MoeSchedule::interleaved);
  const MoeConfig& c = r.config;
  return {{"shape", c.shape.name},
          {"hidden", c.shape.hidden},
          {"inter", c.shape.inter},
          {"experts", c.shape.experts},
          {"topk", c.shape.topk},
          {"tokens", c.tokens},
          {"P", c.P},
          {"backend", c.backend},
          {"placement", c.placement},
          {"routing", c.routing},
          {"block_m", r.pred.block_m},
          {"profile", r.profile},
          {"compute_source", r.compute_source},
          {"compute_ms", r.pred.compute_ns * 1e-6},
          {"bytes_dispatch", r.pred.bytes_dispatch},
          {"bytes_combine", r.pred.bytes_combine},
          {"bytes_stored", r.pred.bytes_stored},
          {"regime",
           {{"name", r.pred.regime.name},
            {"rho", r.pred.regime.rho},
            {"burst_bytes", r.pred.regime.burst_bytes},
            {"excess_bytes", r.pred.regime.excess_bytes},
            {"capacity_bytes", r.pred.regime.capacity_bytes},
            {"mean_rate", r.pred.regime.mean_rate},
            {"contended", r.pred.regime.contended()}}},
          {"schedulers", sch},
          {"measured_ew_over_il", {{"paired", num_or_null(r.paired_ew_over_il)}, {"medians", num_or_null(ew / il)}}},
          {"faster_measured", fm == 0 && !(std::isfinite(ew) && std::isfinite(il)) ? nlohmann::json()
                                                                                   : nlohmann::json(faster_name(fm))},
          {"faster_predicted", faster_name(fp)}};
}

struct PathSummary {
  std::vector<double> abs_err;
  std::map<std::string, std::vector<double>> phase_abs_err;
  int resolved = 0, named = 0;
};

struct Summary {
  std::vector<double> abs_err;
  int resolved = 0, named = 0;
  std::map<std::string, int> configs, contended, gains;  // gains: interleaved predicted > tie faster than expert-wave
  std::map<std::string, PathSummary> paths;
};

Summary summarize(const std::vector<Row>& rows, double tie) {
  Summary s;
  for (const Row& r : rows) {
    const std::string path = path_of(r.config);
    ++s.configs[path];
    if (r.pred.regime.contended()) ++s.contended[path];
    if (r.pred.schedulers.at(MoeSchedule::expert_wave).total_ns() >
        (1 + tie) * r.pred.schedulers.at(MoeSchedule::interleaved).total_ns())
      ++s.gains[path];
    PathSummary& ps = s.paths[path];
    for (MoeSchedule k : kSchedules) {
      auto it = r.measured_ms.find(k);
      if (it != r.measured_ms.end() && std::isfinite(it->second) && it->second > 0) {
        const double e = std::abs(r.pred.schedulers.at(k).total_ns() * 1e-6 - it->second) / it->second;
        s.abs_err.push_back(e);
        ps.abs_err.push_back(e);
      }
      for (const char* ph : kPhases) {
        const double m = measured_phase(r, k, ph);
        if (std::isfinite(m) && m > 0)
          ps.phase_abs_err[ph].push_back(std::abs(predicted_phase_ms(r.pred.schedulers.at(k), ph) - m) / m);
      }
    }
    const int fm = faster_measured(r, tie);
    if (fm == 0) continue;
    ++s.resolved;
    ++ps.resolved;
    const int fp = faster(r.pred.schedulers.at(MoeSchedule::expert_wave).total_ns(),
                          r.pred.schedulers.at(MoeSchedule::interleaved).total_ns(), 0);
    s.named += fp == fm;
    ps.named += fp == fm;
  }
  return s;
}

void print(const std::vector<Row>& rows, const MoePredictArgs& a, bool measured) {
  const Summary s = summarize(rows, a.tie);
  const double med = moe_median(s.abs_err);
  if (a.out.format() == Format::json) {
    nlohmann::json list = nlohmann::json::array();
    for (const Row& r : rows) list.push_back(row_json(r, a.tie));
    nlohmann::json per_path = nlohmann::json::object();
    for (const auto& [path, n] : s.configs) {
      const PathSummary& ps = s.paths.at(path);
      nlohmann::json phases = nlohmann::json::object();
      for (const char* ph : kPhases) {
        auto it = ps.phase_abs_err.find(ph);
        phases[ph] = num_or_null(it == ps.phase_abs_err.end() ? NAN : moe_median(it->second));
      }
      per_path[path] = {{"configs", n},
                        {"contended", s.contended.count(path) ? s.contended.at(path) : 0},
                        {"predicted_gain", s.gains.count(path) ? s.gains.at(path) : 0},
                        {"median_abs_error", num_or_null(moe_median(ps.abs_err))},
                        {"errors", ps.abs_err.size()},
                        {"phase_median_abs_error", phases},
                        {"resolved_pairs", ps.resolved},
                        {"named_faster", ps.named}};
    }
    std::cout << nlohmann::json{{"sweep", a.sweep.empty() ? nlohmann::json() : nlohmann::json(a.sweep)},
                                {"configs", list},
                                {"summary",
                                 {{"median_abs_error", num_or_null(med)},
                                  {"errors", s.abs_err.size()},
                                  {"resolved_pairs", s.resolved},
                                  {"named_faster", s.named},
                                  {"named_faster_share", num_or_null(s.resolved ? double(s.named) / s.resolved : NAN)},
                                  {"tie", a.tie},
                                  {"paths", per_path}}}}
                     .dump(2)
              << "\n";
    return;
  }
  if (a.out.format() == Format::csv) {
    nlohmann::json list = nlohmann::json::array();
    for (const Row& r : rows) {
      const nlohmann::json j = row_json(r, a.tie);
      for (MoeSchedule k : kSchedules) {
        const nlohmann::json& p = j["schedulers"][moe_schedule_name(k)];
        list.push_back({{"shape", shape_label(r.config.shape)}, {"tokens", j["tokens"]}, {"P", j["P"]}, {"backend", j["backend"]},
                        {"placement", j["placement"]}, {"routing", j["routing"]}, {"block_m", j["block_m"]},
                        {"profile", j["profile"]}, {"regime", j["regime"]["name"]}, {"rho", j["regime"]["rho"]},
                        {"excess_bytes", j["regime"]["excess_bytes"]}, {"mean_rate", j["regime"]["mean_rate"]},
                        {"scheduler", moe_schedule_name(k)}, {"measured_ms", p["measured_ms"]},
                        {"predicted_ms", p["predicted_ms"]}, {"error", p["error"]}, {"experts_ms", p["experts_ms"]},
                        {"stalled_ms", p["stalled_ms"]}});
      }
    }
    std::cout << csv_of(kCsvColumns, list);
    return;
  }
  Table t({"shape", "T", "P", "path", "BM", "regime", "rho", "excess", "capacity", "mean/R", "scheduler", "measured",
           "predicted", "error", "experts", "stalled"});
  for (const Row& r : rows) {
    const MoeRegime& g = r.pred.regime;
    for (MoeSchedule k : kSchedules) {
      const MoeLayerPrediction& p = r.pred.schedulers.at(k);
      const double m = r.measured_ms.count(k) ? r.measured_ms.at(k) : NAN;
      t.add({shape_label(r.config.shape), std::to_string(r.config.tokens), std::to_string(r.config.P), path_of(r.config),
             std::to_string(r.pred.block_m), g.name, fmt::format("{:.2f}", g.rho), format_bytes(g.excess_bytes), format_bytes(g.capacity_bytes),
             fmt::format("{:.2f}", g.mean_rate), moe_schedule_name(k), ms_text(m), ms_text(p.total_ns() * 1e-6),
             pct((p.total_ns() * 1e-6 - m) / m), ms_text(p.experts_ns * 1e-6), ms_text(p.stalled_ns * 1e-6)});
    }
  }
  std::cout << t.text();
  std::cout << "times in ms (measured: median of the rounds); rho: G SMs' L2 store rate over R; excess: what an "
               "expert-wave wave leaves in the stage; capacity: what the stage offers it; stalled: summed over L2 tiles; mean/R: all stored bytes over the compute-only time, over R\n";
  for (const auto& [path, n] : s.configs) {
    const int c = s.contended.count(path) ? s.contended.at(path) : 0;
    std::cout << fmt::format("{}: {} of {} configurations in the contended regime (rho > 1, a wave's excess > the "
                             "stage's capacity){}; interleaved predicted more than {:.0f}% faster than expert-wave in "
                             "{}\n",
                             path, c, n, c < 10 ? " -- fewer than the 10 the issue asks for" : "", 100 * a.tie,
                             s.gains.count(path) ? s.gains.at(path) : 0);
  }
  auto pct_of = [](double v) { return std::isfinite(v) ? fmt::format("{:.1f}%", 100 * v) : std::string("-"); };
  if (measured)
    for (const auto& [path, ps] : s.paths) {
      if (ps.abs_err.empty()) continue;
      std::string phases;
      for (const char* ph : kPhases) {
        auto it = ps.phase_abs_err.find(ph);
        phases += fmt::format("{}{} {}", phases.empty() ? "" : ", ", ph,
                              pct_of(it == ps.phase_abs_err.end() ? NAN : moe_median(it->second)));
      }
      std::cout << fmt::format("{}: median |error| {} over {} times ({}); names the faster in {} of {}\n", path,
                               pct_of(moe_median(ps.abs_err)), ps.abs_err.size(), phases, ps.named, ps.resolved);
    }
  if (measured)
    std::cout << fmt::format(
        "median |error| {} over {} scheduler times; names the faster of expert-wave and interleaved in {} of {} "
        "configurations where they differ by more than {:.0f}% (measured: the median of the rounds' paired ratio; the medians where the rounds are not paired)\n",
        std::isfinite(med) ? fmt::format("{:.1f}%", 100 * med) : std::string("-"), s.abs_err.size(), s.named,
        s.resolved, 100 * a.tie);
}

Profile profile_for(const MoePredictArgs& a, const std::string& sweep_profile, const MoeConfig& c) {
  if (!a.profile.empty()) return load_profile(a.profile);
  if (!sweep_profile.empty()) return load_profile(sweep_profile);
  return load_profile(moe_default_profile(c));
}

void run_moe_predict(const MoePredictArgs& a, const CLI::App& sub) {
  const bool single = !a.shape.empty() || a.tokens > 0 || a.P > 0;
  if (!a.sweep.empty() + single + a.grid != 1)
    throw Error("moe-predict: nothing to predict; expected one of SWEEP.json, --shape/--tokens/--P (one configuration) or --grid");
  // Options this mode would ignore are refused, not silently dropped.
  if (a.grid) refuse_unused(sub, {"--tile", "--compute-only-ms"}, "with --grid (its configurations are fixed)");
  if (!a.sweep.empty())
    refuse_unused(sub, {"--tile", "--compute-only-ms", "--placement", "--backend", "--routing"},
                  "with a recorded sweep (the sweep gives each configuration's)");
  if (a.placement != "host" && a.placement != "device")
    throw Error(fmt::format("--placement \"{}\": expected host or device", a.placement));
  if (a.backend != "emulated" && a.backend != "peer" && a.backend != "nccl")
    throw Error(fmt::format("--backend \"{}\": expected emulated, peer or nccl", a.backend));
  if (a.routing != "uniform" && a.routing != "zipf")
    throw Error(fmt::format("--routing \"{}\": expected uniform or zipf", a.routing));
  std::vector<Row> rows;
  if (!a.sweep.empty()) {
    const RecordedMoeSweep sweep = read_moe_sweep(a.sweep);
    // One profile per sweep only when every configuration is on one path.
    bool one_path = true;
    for (const RecordedMoeConfig& rc : sweep.configs)
      one_path = one_path && path_of(rc.config) == path_of(sweep.configs.front().config);
    if (!one_path && !sweep.profile.empty() && a.profile.empty())
      warn(fmt::format("{} mixes paths: each configuration gets its path's profile, not \"{}\"", a.sweep,
                       sweep.profile));
    for (size_t i = 0; i < sweep.configs.size(); ++i) {
      const RecordedMoeConfig& rc = sweep.configs[i];
      Row r;
      r.config = rc.config;
      r.config.sms = a.sms;
      const Profile p = profile_for(a, one_path ? sweep.profile : "", r.config);
      r.profile = p.name;
      std::string source;
      std::optional<double> experts_ms = moe_compute_only_experts_ms(rc, &source);
      if (!experts_ms) {
        auto all = rc.ms.find("compute-only");
        if (all != rc.ms.end() && !all->second.empty()) {
          // No measured dispatch phase: the predicted one comes off the compute-only time.
          const double dispatch_ms = predict_moe_config(r.config, p).schedulers.begin()->second.dispatch_ns * 1e-6;
          const double rest = moe_median(all->second) - dispatch_ms;
          if (rest > 0) {
            experts_ms = rest;
            source = "compute-only less the predicted dispatch";
          }
        }
      }
      r.compute_source = experts_ms ? source : "table";
      r.pred = predict_moe_config(r.config, p,
                                  experts_ms ? std::optional<double>(*experts_ms * 1e6) : std::nullopt);
      r.paired_ew_over_il = paired_ratio(rc, "fused/expert-wave", "fused/interleaved");
      for (MoeSchedule k : kSchedules) {
        auto it = rc.ms.find("fused/" + moe_schedule_name(k));
        r.measured_ms[k] = it == rc.ms.end() ? NAN : moe_median(it->second);
        auto ph = rc.phase_ms.find("fused/" + moe_schedule_name(k));
        if (ph != rc.phase_ms.end())
          for (const auto& [name, v] : ph->second)
            if (!v.empty()) r.measured_phase_ms[k][name] = moe_median(v);
      }
      rows.push_back(std::move(r));
    }
    print(rows, a, true);
    return;
  }
  std::vector<MoeConfig> configs;
  if (a.grid) {
    configs = grid_configs(a);
  } else {
    if (a.shape.empty() || a.tokens < 1 || a.P < 1)
      throw Error("moe-predict: one configuration needs --shape, --tokens and --P; expected all three (--tokens and --P >= 1)");
    MoeConfig c;
    c.shape = moe_prediction_shape(a.shape);
    c.tokens = a.tokens;
    c.P = a.P;
    c.backend = a.backend;
    c.placement = a.placement;
    c.routing = a.routing;
    c.tile = tile_of(a.tile);
    c.sms = a.sms;
    configs.push_back(c);
  }
  for (const MoeConfig& c : configs) {
    Row r;
    r.config = c;
    const Profile p = profile_for(a, "", c);
    r.profile = p.name;
    r.compute_source = a.compute_only_ms > 0 ? "--compute-only-ms" : "table";
    r.pred = predict_moe_config(
        c, p, a.compute_only_ms > 0 ? std::optional<double>(a.compute_only_ms * 1e6) : std::nullopt);
    rows.push_back(std::move(r));
  }
  print(rows, a, false);
}

}  // namespace

void add_moe_predict_command(CLI::App& app) {
  auto a = std::make_shared<MoePredictArgs>();
  auto* sub = app.add_subcommand(
      "moe-predict", "Model of the fused MoE layer per scheduler: re-predict a recorded sweep, one configuration, or "
                     "the issue's grid with each configuration's regime (CPU)");
  sub->add_option("sweep", a->sweep, "A recorded sweep (results/<machine>/moe-sweep/moe-sweep.json)");
  sub->add_option("--profile", a->profile,
                  "Profile JSON or embedded name (default: the sweep's, else h200-host-pcie / h200-local / h200-peer "
                  "by path)");
  sub->add_option("--shape", a->shape, "One configuration: a shape name or hidden/inter/experts/topk");
  sub->add_option("--tokens", a->tokens, "Tokens per rank")->check(CLI::Range(1, 1 << 24));
  sub->add_option("--P", a->P, "Ranks")->check(CLI::Range(1, 1024));
  sub->add_option("--placement", a->placement, "host or device (emulated ranks' buffers)")->capture_default_str();
  sub->add_option("--backend", a->backend, "emulated, peer or nccl")->capture_default_str();
  sub->add_option("--routing", a->routing, "uniform or zipf")->capture_default_str();
  sub->add_option("--tile", a->tile, "auto, m128n256 or m64n256")->capture_default_str();
  sub->add_option("--sms", a->sms, "SMs of the GPU (the persistent grid)")->capture_default_str()->check(
      CLI::Range(1, 65536));
  sub->add_option("--compute-only-ms", a->compute_only_ms,
                  "One configuration: the fused kernel's measured compute-only time (ms); the tile times are scaled "
                  "to it (default: the GEMM table)")
      ->check(CLI::Range(0.0, 1e6));
  sub->add_flag("--grid", a->grid,
                "The issue's 84 configurations (6 shapes x T 256..16K x P 2, 4; peer/nccl: P = 2) on the path "
                "--backend/--placement give");
  sub->add_option("--tie", a->tie, "Measured schedulers closer than this (fraction) are not a resolved pair")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  add_output_flags(sub, a->out);
  sub->callback([a, sub] { run_moe_predict(*a, *sub); });
}

}  // namespace xstage::cli
