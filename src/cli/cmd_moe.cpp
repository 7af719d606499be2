// xstage moe: the expert-parallel MoE layer (dispatch, L1 + SwiGLU, L2,
// combine) on a world, fused under each schedule beside the unfused
// baseline and the compute-only floor: --check against the fp64 CPU
// reference and bit for bit between variants, --bench in paired rounds, -o
// the sweep record of docs/design/moe-layer.md. The measurement is the
// library's (harness/moe/moe_layer_bench.hpp); here the options, the files and the
// printing.
#include <algorithm>
#include <cmath>
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "harness/moe/moe_layer_bench.hpp"
#include "util/npy.hpp"
#include "util/output_file.hpp"
#include "util/replace_file.hpp"
#include "xstage/core/build_info.hpp"
#include "xstage/core/error.hpp"
#include "xstage/core/units.hpp"

namespace xstage::cli {

namespace {

struct MoeCliArgs {
  std::string shape, routing = "uniform", backend = "emulated", placement, tile = "auto", profile;
  std::vector<int> tokens;
  std::vector<std::string> schedules, variants;
  int ranks = -1, rounds = 11, warmup = 1, check_tokens = 0;
  uint64_t seed = 1;
  double timeout_s = 10;
  bool check = false, bench = false, floor_probe = false, dry_run = false;
  std::string x_path, ids_path, weights_path, w13_path, w2_path, out_file, trace_file;
  OutputFlags out;
};

const std::vector<std::string>& all_bodies() {
  static const std::vector<std::string> b{"fused/expert-wave", "fused/interleaved", "fused/model-guided", "unfused",
                                          "compute-only"};
  return b;
}

// A .npy input against its expected shape; 0 in `shape` takes any extent
// (P before a peer world has counted its GPUs, T before a file gave it).
std::vector<float> load(const std::string& path, const char* opt, const std::vector<size_t>& shape,
                        const char* names) {
  if (path.empty()) return {};
  NpyArray a = read_npy(path);
  bool ok = a.shape.size() == shape.size();
  for (size_t i = 0; ok && i < shape.size(); ++i) ok = shape[i] == 0 || shape[i] == a.shape[i];
  if (!ok) {
    std::vector<std::string> want;
    for (size_t d : shape) want.push_back(d ? std::to_string(d) : "any");
    throw Error(fmt::format("{} {}: expected shape {} = [{}], got [{}]", opt, path, names, fmt::join(want, ", "),
                            fmt::join(a.shape, ", ")));
  }
  return std::move(a.data);
}

// The first axis of T among the given token files (x [P, T, hidden], ids and weights [P, T, k]).
int tokens_of_files(const MoeCliArgs& a) {
  for (const std::string* p : {&a.x_path, &a.ids_path, &a.weights_path})
    if (!p->empty()) {
      const NpyArray f = read_npy(*p);
      if (f.shape.size() == 3 && f.shape[1] >= 1 && f.shape[1] <= size_t(1) << 20) return int(f.shape[1]);
    }
  return 0;
}

MoeLayerBenchOptions to_options(const MoeCliArgs& a) {
  MoeLayerBenchOptions o;
  o.world.backend = parse_backend(a.backend);
  // Default: host memory (the PCIe path) for emulated ranks on one GPU; the
  // other GPUs' memory for peer and nccl (NCCL's windows exist only there).
  o.world.placement = a.placement.empty()
                          ? (o.world.backend == Backend::emulated ? Placement::host : Placement::device)
                          : parse_placement(a.placement);
  if (a.ranks != -1 && a.ranks < 1) throw Error(fmt::format("--ranks: expected a whole number >= 1, got {}", a.ranks));
  o.world.ranks = a.ranks == -1 ? 0 : a.ranks;
  o.shape = parse_moe_shape(a.shape);
  o.routing = parse_moe_routing(a.routing);
  o.seed = a.seed;
  for (const auto& s : a.schedules) o.schedules.push_back(parse_moe_schedule(s));
  for (const auto& v : a.variants) o.variants.push_back(parse_moe_layer_variant(v));
  o.tile = parse_moe_tile(a.tile);
  o.timeout_s = a.timeout_s;
  o.check = a.check, o.check_tokens = a.check_tokens;
  o.bench = a.bench, o.rounds = a.rounds, o.warmup = a.warmup;
  o.floor_probe = a.floor_probe;
  o.profile = a.profile;
  o.trace = !a.trace_file.empty();
  const bool files = !a.x_path.empty() || !a.ids_path.empty() || !a.weights_path.empty();
  const int T_files = files ? tokens_of_files(a) : 0;
  if (!a.tokens.empty()) {
    o.tokens = a.tokens;
  } else if (T_files > 0) {
    o.tokens = {T_files};
  }
  if ((!a.ids_path.empty() || !a.weights_path.empty()) && a.routing != "uniform")
    throw Error("--routing: the routing comes from --ids and --weights; expected --routing left out");
  validate_moe_layer_bench_options(o);  // resolves P where it can
  const size_t P = size_t(std::max(o.world.ranks, 0)), T = size_t(o.tokens.front()), H = size_t(o.shape.hidden),
               I = size_t(o.shape.inter), E = size_t(o.shape.experts), k = size_t(o.shape.topk);
  o.x = load(a.x_path, "--x", {P, T, H}, "[P, T, hidden]");
  o.ids = load(a.ids_path, "--ids", {P, T, k}, "[P, T, top-k]");
  o.weights = load(a.weights_path, "--weights", {P, T, k}, "[P, T, top-k]");
  o.w13 = load(a.w13_path, "--w13", {E, 2 * I, H}, "[experts, 2 inter, hidden]");
  o.w2 = load(a.w2_path, "--w2", {E, H, I}, "[experts, hidden, inter]");
  validate_moe_layer_bench_options(o);  // the arrays' sizes
  return o;
}

nlohmann::json sizes_json(const MoeLayerSizes& s) {
  return {{"rows_cap", s.rows_cap},         {"x_send", s.x_send},       {"routes", s.routes},
          {"counts", s.counts},             {"combine", s.combine},     {"flags", s.flags},
          {"pool_x", s.pool_x},             {"pool_h", s.pool_h},       {"pool_out", s.pool_out},
          {"row_meta", s.row_meta},         {"weights", s.weights},     {"workspace", s.workspace},
          {"output", s.output},             {"symmetric_total", s.symmetric_total()},
          {"local_total", s.local_total()}};
}

std::string sizes_text(const MoeLayerSizes& s, const MoeShape& shape, int P, int T_max, Backend b, Placement p) {
  const int here = b == Backend::nccl ? 1 : P;  // ranks whose buffers this process allocates
  return fmt::format(
      "MoE layer {} ({}/{}/{}/{}), P = {}, up to {} tokens a rank: per rank {} symmetric ({}) + {} local "
      "(device); {} rank{} here: {} {}, {} device\n",
      shape.name, shape.hidden, shape.inter, shape.experts, shape.topk, P, T_max, format_bytes(double(s.symmetric_total())),
      p == Placement::host ? "pinned host memory" : "device memory", format_bytes(double(s.local_total())), here,
      here == 1 ? "" : "s", format_bytes(double(s.symmetric_total()) * here),
      p == Placement::host ? "pinned host" : "device", format_bytes(double(s.local_total()) * here));
}

// Per-round statistics of a ratio (or a time): the median and the range.
struct Spread {
  double median = NAN, lo = NAN, hi = NAN;
};
Spread spread(std::vector<double> v) {
  Spread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.lo = v.front(), s.hi = v.back(), s.median = v[v.size() / 2];
  return s;
}

struct ConfigView {
  const MoeLayerConfigResult& c;
  const std::vector<double>* ms(const std::string& label) const {
    for (size_t i = 0; i < c.bodies.size(); ++i)
      if (c.bodies[i] == label && i < c.ms.size()) return &c.ms[i];
    return nullptr;
  }
  // Per round: a over b (b the smaller of two bodies' times when b2 is given).
  std::vector<double> ratio(const std::string& a, const std::string& b, const std::string& b2 = "") const {
    const auto *x = ms(a), *y = ms(b), *y2 = b2.empty() ? nullptr : ms(b2);
    std::vector<double> r;
    if (!x || !y || (!b2.empty() && !y2)) return r;
    for (size_t i = 0; i < x->size(); ++i) r.push_back((*x)[i] / (y2 ? std::min((*y)[i], (*y2)[i]) : (*y)[i]));
    return r;
  }
  // The fused schedule with the least median time.
  std::string best_fused() const {
    std::string best;
    double t = INFINITY;
    for (const auto& l : c.bodies)
      if (l.rfind("fused/", 0) == 0 && ms(l) && spread(*ms(l)).median < t) t = spread(*ms(l)).median, best = l;
    return best;
  }
};

double floor_R(const MoeLayerBenchReport& rep) { return rep.probe_R_Bps ? *rep.probe_R_Bps : rep.profile_R_Bps; }

// The floor's compute: the median of compute-only's experts phase (the fused
// kernel alone; the run may first refill the pool an unfused run reused),
// else of its whole run.
double compute_only_ms(const MoeLayerConfigResult& c) {
  for (size_t i = 0; i < c.bodies.size(); ++i)
    if (c.bodies[i] == "compute-only") {
      if (i < c.phase_ms.size() && !c.phase_ms[i][1].empty()) return spread(c.phase_ms[i][1]).median;
      if (i < c.ms.size() && !c.ms[i].empty()) return spread(c.ms[i]).median;
    }
  return NAN;
}

nlohmann::json config_json(const MoeLayerBenchReport& rep, const MoeLayerConfigResult& c, MoeRouting routing) {
  const nlohmann::json none;
  nlohmann::json plans = nlohmann::json::object(), ms = nlohmann::json::object(), phases = nlohmann::json::object();
  for (const char* s : {"expert-wave", "interleaved", "model-guided"}) plans[s] = none;
  for (const auto& [s, p] : c.plans)
    plans[to_string(s)] = {{"schedule", to_string(p.schedule == MoeSchedule::model_guided ? p.runs_as : p.schedule)},
                           {"wave_tiles", p.wave_tiles},
                           {"l2_share", p.l2_share},
                           {"lag_tiles", p.lag_tiles}};
  for (const auto& b : all_bodies()) ms[b] = none, phases[b] = none;
  for (size_t i = 0; i < c.bodies.size() && i < c.ms.size(); ++i) {
    ms[c.bodies[i]] = c.ms[i];
    phases[c.bodies[i]] = {{"dispatch", c.phase_ms[i][0]}, {"experts", c.phase_ms[i][1]}, {"combine", c.phase_ms[i][2]}};
  }
  nlohmann::json check = none;
  if (c.check)
    check = {{"ok", c.check->ok},
             {"rel_err", num_or_null(c.check->rel_err)},
             {"max_abs_err", num_or_null(c.check->max_abs_err)},
             {"bit_exact_vs_unfused", c.check->bit_exact_vs_unfused ? nlohmann::json(*c.check->bit_exact_vs_unfused) : none},
             {"tokens_checked", c.check->tokens_checked},
             {"unwritten", c.check->unwritten},
             {"expert_rows_mismatch", c.check->expert_rows_mismatch},
             {"failure", c.check->ok ? none : nlohmann::json(c.check->failure)}};
  return {{"shape", rep.shape.name},
          {"hidden", rep.shape.hidden},
          {"inter", rep.shape.inter},
          {"experts", rep.shape.experts},
          {"topk", rep.shape.topk},
          {"tokens", c.tokens},
          {"P", rep.P},
          {"backend", to_string(rep.backend)},
          {"placement", to_string(rep.placement)},
          {"routing", rep.inputs_given ? none : nlohmann::json(to_string(routing))},  // null: from .npy files
          {"tile", to_string(rep.tile)},
          {"rows_max_rank", c.traffic.rows_max_rank},
          {"rows_per_rank", c.traffic.rows_per_rank},
          {"bytes_dispatch", c.traffic.bytes_dispatch},
          {"bytes_combine", c.traffic.bytes_combine},
          {"bytes_floor", c.traffic.bytes_floor},
          {"plans", plans},
          {"rounds", c.rounds > 0 ? nlohmann::json(c.rounds) : none},
          {"ms", ms},
          {"phase_ms", phases},
          {"sm_clock_mhz", c.sm_clock_mhz},
          {"check", check}};
}

nlohmann::json report_json(const MoeLayerBenchReport& rep, const MoeLayerBenchOptions& o) {
  const nlohmann::json none;
  nlohmann::json configs = nlohmann::json::array();
  for (const auto& c : rep.configs) configs.push_back(config_json(rep, c, o.routing));
  return {{"tool", "xstage moe"},
          {"device", rep.device.name},
          {"driver", rep.device.driver},
          {"sm_clock_mhz_max", rep.device.sm_clock_mhz},
          {"sms", rep.sms},
          {"date", utc_now_iso()},
          {"commit", build_commit()},
          {"command", command_line()},
          {"world", rep.world},
          {"profile", rep.profile},
          {"profile_R_GBps", rep.profile_R_Bps > 0 ? nlohmann::json(rep.profile_R_Bps / 1e9) : none},
          {"probe",
           {{"R_GBps", rep.probe_R_Bps ? nlohmann::json(*rep.probe_R_Bps / 1e9) : none},
            {"seconds", rep.probe_R_Bps ? nlohmann::json(rep.probe_seconds) : none}}},
          {"floor", "floor_ms = max(median compute-only experts-phase ms, bytes_floor / R): R the probe's where measured in this "
                    "process, else the profile's"},
          {"timing", "paired rounds: every body once a round, rotated; a run timed by CUDA events on the lead "
                     "stream around fork / run / join, after a 100 us kernel that reads the SM clock and keeps the "
                     "GPU busy while the host enqueues; phase_ms: the layer's events between its kernels; each value "
                     "the largest over ranks; sm_clock_mhz: per round, the median reading"},
          {"inputs", rep.inputs_given ? "npy" : fmt::format("random seed {}", o.seed)},
          {"sizes", sizes_json(rep.sizes)},
          {"configs", configs}};
}

std::string fmt_spread(const Spread& s, int digits) {
  if (std::isnan(s.median)) return "-";
  return fmt::format("{:.{}f} ({:.{}f} .. {:.{}f})", s.median, digits, s.lo, digits, s.hi, digits);
}

void print_text(const MoeLayerBenchReport& rep, const MoeLayerBenchOptions& o) {
  std::cout << fmt::format("{} on {}; profile {}\n", rep.world, rep.device.name, rep.profile);
  for (const auto& c : rep.configs) {
    const ConfigView v{c};
    std::cout << fmt::format("\nT = {} tokens a rank, {} routing, tile {}: pool rows per rank [{}], {} a rank "
                             "crosses ranks each way; {} over the path\n",
                             c.tokens, rep.inputs_given ? "npy" : to_string(o.routing), to_string(rep.tile),
                             fmt::join(c.traffic.rows_per_rank, ", "), format_bytes(c.traffic.bytes_combine),
                             format_bytes(c.traffic.bytes_floor));
    for (const auto& [s, p] : c.plans)
      std::cout << fmt::format("  plan {}: runs as {}, wave_tiles {}, l2_share {:.3f}, lag_tiles {}\n", to_string(s),
                               to_string(p.schedule == MoeSchedule::model_guided ? p.runs_as : p.schedule),
                               p.wave_tiles, p.l2_share, p.lag_tiles);
    if (c.check)
      std::cout << fmt::format("  check: {}, rel_err {:.3e} over {} tokens, unwritten {}, bit-exact vs unfused {}{}\n",
                               c.check->ok ? "ok" : "FAILED", c.check->rel_err, c.check->tokens_checked,
                               c.check->unwritten,
                               c.check->bit_exact_vs_unfused ? (*c.check->bit_exact_vs_unfused ? "yes" : "NO") : "-",
                               c.check->ok ? "" : ": " + c.check->failure);
    if (c.ms.empty()) continue;
    Table t({"variant", "median_ms", "min_ms", "max_ms", "dispatch_ms", "experts_ms", "combine_ms"});
    for (size_t i = 0; i < c.bodies.size(); ++i) {
      const Spread s = spread(c.ms[i]);
      t.add({c.bodies[i], fmt::format("{:.4f}", s.median), fmt::format("{:.4f}", s.lo), fmt::format("{:.4f}", s.hi),
             fmt::format("{:.4f}", spread(c.phase_ms[i][0]).median),
             fmt::format("{:.4f}", spread(c.phase_ms[i][1]).median),
             fmt::format("{:.4f}", spread(c.phase_ms[i][2]).median)});
    }
    std::cout << t.text();
    const Spread clock = spread(c.sm_clock_mhz);
    std::cout << fmt::format("  {} rounds; SM clock after each round {:.0f} MHz ({:.0f} .. {:.0f})\n", c.rounds,
                             clock.median, clock.lo, clock.hi);
    std::cout << fmt::format("  interleaved / expert-wave per round: {}\n",
                             fmt_spread(spread(v.ratio("fused/interleaved", "fused/expert-wave")), 3));
    std::cout << fmt::format("  model-guided / the better of the two: {}\n",
                             fmt_spread(spread(v.ratio("fused/model-guided", "fused/interleaved", "fused/expert-wave")), 3));
    const std::string best = v.best_fused();
    if (!best.empty()) {
      std::cout << fmt::format("  unfused / {}: {}\n", best, fmt_spread(spread(v.ratio("unfused", best)), 3));
      const auto* co = v.ms("compute-only");
      const double R = floor_R(rep);
      if (co && R > 0) {
        const double compute = compute_only_ms(c), drain = c.traffic.bytes_floor / R * 1e3;
        const double floor = std::max(compute, drain);
        std::cout << fmt::format("  {} / floor: {:.3f}; floor {:.4f} ms = max(compute-only {:.4f} ms, {} / {} = "
                                 "{:.4f} ms), R from {}\n",
                                 best, spread(*v.ms(best)).median / floor, floor, compute,
                                 format_bytes(c.traffic.bytes_floor), format_rate(R), drain,
                                 rep.probe_R_Bps ? "the probe in this process" : "profile " + rep.profile);
      }
    }
  }
}

std::string csv_rows(const MoeLayerBenchReport& rep) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& c : rep.configs)
    for (size_t i = 0; i < c.bodies.size(); ++i) {
      const bool timed = i < c.ms.size();
      auto med = [&](const std::vector<double>& v) { return timed ? num_or_null(spread(v).median) : nlohmann::json(); };
      rows.push_back({{"tokens", c.tokens},
                      {"variant", c.bodies[i]},
                      {"median_ms", timed ? med(c.ms[i]) : nlohmann::json()},
                      {"min_ms", timed ? num_or_null(spread(c.ms[i]).lo) : nlohmann::json()},
                      {"max_ms", timed ? num_or_null(spread(c.ms[i]).hi) : nlohmann::json()},
                      {"dispatch_ms", timed ? med(c.phase_ms[i][0]) : nlohmann::json()},
                      {"experts_ms", timed ? med(c.phase_ms[i][1]) : nlohmann::json()},
                      {"combine_ms", timed ? med(c.phase_ms[i][2]) : nlohmann::json()},
                      {"check_ok", c.check ? nlohmann::json(c.check->ok) : nlohmann::json()}});
    }
  return csv_of({"tokens", "variant", "median_ms", "min_ms", "max_ms", "dispatch_ms", "experts_ms", "combine_ms",
                 "check_ok"},
                rows);
}

std::string trace_csv(const MoeLayerBenchReport& rep) {
  std::string s = "tokens,schedule,rank,gemm,sm,start_ns,epilogue_ns,end_ns\n";
  for (const auto& c : rep.configs)
    for (const auto& t : c.trace)
      s += fmt::format("{},{},{},{},{},{:.0f},{:.0f},{:.0f}\n", c.tokens, to_string(t.schedule), t.rank, t.tile.gemm,
                       t.tile.sm, t.tile.start_ns, t.tile.epilogue_ns, t.tile.end_ns);
  return s;
}

void run_moe(const MoeCliArgs& a) {
  const MoeLayerBenchOptions o = to_options(a);
  const int T_max = *std::max_element(o.tokens.begin(), o.tokens.end());
  if (a.dry_run) {
    // Sizes from the shape alone: no GPU needed (P from --ranks, or the GPUs a peer world would take).
    int P = o.world.ranks;
    if (P < 1) P = cuda_device_count();
    if (P < 1) throw Error("--dry-run: the ranks P are not known (no GPU to count); expected --ranks");
    if (o.shape.experts % P != 0)
      throw Error(fmt::format("shape {}: {} experts do not split over {} ranks; expected a rank count that divides the experts (experts % P = 0)", o.shape.name,
                              o.shape.experts, P));
    MoeLayerOptions lo;
    lo.shape = o.shape, lo.tokens_max = T_max, lo.tile = o.tile, lo.timeout_s = o.timeout_s;
    const MoeLayerSizes s = moe_layer_sizes(lo, P);
    if (a.out.format() == Format::json) {
      std::cout << nlohmann::json{{"shape", o.shape.name}, {"hidden", o.shape.hidden}, {"inter", o.shape.inter},
                                  {"experts", o.shape.experts}, {"topk", o.shape.topk}, {"P", P},
                                  {"tokens_max", T_max}, {"backend", to_string(o.world.backend)},
                                  {"placement", to_string(o.world.placement)}, {"sizes", sizes_json(s)}}
                       .dump(2)
                << "\n";
    } else {
      std::cout << sizes_text(s, o.shape, P, T_max, o.world.backend, o.world.placement);
    }
    return;
  }
  // Before the GPU work: each output writable, none an input, not both one file.
  detail::check_outputs({{a.out_file, a.out_file.empty() ? "" : "-o"},
                         {a.trace_file, a.trace_file.empty() ? "" : "--trace"}},
                        {a.x_path, a.ids_path, a.weights_path, a.w13_path, a.w2_path});
  if (a.out.format() == Format::table && o.world.ranks >= 1) {
    MoeLayerOptions lo;
    lo.shape = o.shape, lo.tokens_max = T_max, lo.tile = o.tile;
    std::cout << sizes_text(moe_layer_sizes(lo, o.world.ranks), o.shape, o.world.ranks, T_max, o.world.backend,
                            o.world.placement)
              << std::flush;
  }
  const MoeLayerBenchReport rep = run_moe_layer_bench(o);
  if (!rep.leader) return;
  const nlohmann::json j = report_json(rep, o);
  if (!a.out_file.empty()) detail::write_file_replacing(a.out_file, j.dump(2) + "\n", "-o");
  if (!a.trace_file.empty()) detail::write_file_replacing(a.trace_file, trace_csv(rep), "--trace");
  switch (a.out.format()) {
    case Format::json: std::cout << j.dump(2) << "\n"; break;
    case Format::csv: std::cout << csv_rows(rep); break;
    case Format::table: print_text(rep, o); break;
  }
  for (const auto& c : rep.configs)
    if (c.check && !c.check->ok)
      throw Error(fmt::format("moe --check failed at T = {}: {}; expected the layer to match the CPU reference", c.tokens, c.check->failure));
}

}  // namespace

void add_moe_command(CLI::App& app) {
  auto a = std::make_shared<MoeCliArgs>();
  auto* sub = app.add_subcommand("moe", "The expert-parallel MoE layer (dispatch, experts, combine): fused under "
                                        "each schedule, unfused, compute-only; check and paired benchmark");
  std::vector<std::string> names;
  for (const MoeShape& s : moe_known_shapes()) names.push_back(s.name);
  sub->add_option("--shape", a->shape,
                  fmt::format("The layer: {}, or hidden/inter/experts/topk", fmt::join(names, ", ")))
      ->required();
  sub->add_option("--tokens", a->tokens, "Tokens a rank T (comma-separated; default 1024, or the .npy files' T)")
      ->delimiter(',');
  sub->add_option("--routing", a->routing, "uniform, or zipf (Zipf(1) over experts)")->capture_default_str();
  sub->add_option("--seed", a->seed, "Seed of the random inputs and routing")->capture_default_str();
  sub->add_option("--x", a->x_path, "Tokens .npy [P, T, hidden]");
  sub->add_option("--ids", a->ids_path, "Top-k expert ids .npy [P, T, top-k] (integers; distinct per token)");
  sub->add_option("--weights", a->weights_path, "Routing weights .npy [P, T, top-k]");
  sub->add_option("--w13", a->w13_path, "Gate and up weights .npy [experts, 2 inter, hidden]: gate rows, then up rows");
  sub->add_option("--w2", a->w2_path, "Down weights .npy [experts, hidden, inter]");
  sub->add_option("--backend", a->backend, "emulated (P ranks on one GPU), peer, nccl")->capture_default_str();
  sub->add_option("--ranks", a->ranks, "Ranks P (default: emulated 2, peer every GPU, nccl WORLD_SIZE)");
  sub->add_option("--placement", a->placement,
                  "Symmetric buffers in device or host memory (default: host for emulated, device otherwise)");
  sub->add_option("--schedules", a->schedules, "Fused schedules: expert-wave,interleaved,model-guided (default all)")
      ->delimiter(',');
  sub->add_option("--variants", a->variants, "fused,unfused,compute-only (default all)")->delimiter(',');
  sub->add_option("--tile", a->tile, "auto, m128n256 or m64n256")->capture_default_str();
  sub->add_option("--profile", a->profile,
                  "Profile of the model-guided plan and the floor's R without --floor-probe (name or file; default "
                  "the path's)");
  sub->add_flag("--check", a->check,
                "Poisoned outputs; fused == unfused bit for bit; sampled tokens of every rank against the fp64 CPU "
                "reference");
  sub->add_option("--check-tokens", a->check_tokens, "Tokens a rank the reference compares (default 6)");
  sub->add_flag("--bench", a->bench, "Paired rounds of every variant and schedule, per-phase CUDA events");
  sub->add_option("--rounds", a->rounds, "Rounds of --bench")->capture_default_str();
  sub->add_option("--warmup", a->warmup, "Untimed runs of every body first")->capture_default_str();
  sub->add_option("--timeout", a->timeout_s, "Seconds any wait may take before it fails, naming rank and flag")
      ->capture_default_str();
  sub->add_flag("--floor-probe", a->floor_probe,
                "Measure the floor's drain rate R in this process first (the probe's quick sweep of the path)");
  sub->add_option("--trace", a->trace_file,
                  "Write each schedule's per-tile trace of one fused run as CSV "
                  "(tokens,schedule,rank,gemm,sm,start_ns,epilogue_ns,end_ns)");
  sub->add_flag("--dry-run", a->dry_run, "Print the buffer sizes and exit (no GPU needed)");
  sub->add_option("-o,--output", a->out_file, "Also write the sweep JSON record to FILE");
  add_output_flags(sub, a->out);
  sub->callback([a] { run_moe(*a); });
}

}  // namespace xstage::cli
