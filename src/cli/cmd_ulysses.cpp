// xstage ulysses: Ulysses attention with the output all-to-all, in five
// variants (attention-only, sequential, pipelined, fused, coupled), checked,
// timed and predicted over a sequence-length sweep, beside the physical floor.
#include <algorithm>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "harness/ulysses/ulysses_bench.hpp"
#include "util/output_file.hpp"
#include "util/replace_file.hpp"
#include "xstage/core/build_info.hpp"
#include "xstage/core/error.hpp"
#include "xstage/core/units.hpp"

namespace xstage::cli {

namespace {

struct UlyssesArgs {
  std::string backend = "emulated", placement, profile, local_profile, out_file, dump_dir, kernel = "wgmma";
  std::string pairing = "adjacent", timeline, summary_csv;
  int ranks = -1, iters = 10, warmup = 1, check_rows = 8;
  int64_t batch = 1, heads = 24, head_dim = 128;
  std::vector<int64_t> seqs;
  bool sweep = false, check = false, floor_probe = false;
  std::vector<std::string> variants, stores, orders, flags, a2a;
  std::vector<int> paced_rows, chunks, row_chunks;
  std::string pipeline_graph = "on";
  double max_seconds = 2.0, timeout_s = 60;
  uint64_t seed = 1;
  OutputFlags out;
};

// The sweep of the fused-attention issue: 4k to 128k tokens, doubling.
std::vector<int64_t> default_sweep() { return {4096, 8192, 16384, 32768, 65536, 131072}; }

UlyssesBenchOptions to_options(const UlyssesArgs& a) {
  UlyssesBenchOptions o;
  o.world.backend = parse_backend(a.backend);
  // Default: host memory (the PCIe path) for emulated ranks on one GPU; the
  // other GPUs' memory for peer and nccl (NCCL's windows exist only there).
  o.world.placement = a.placement.empty()
                          ? (o.world.backend == Backend::emulated ? Placement::host : Placement::device)
                          : parse_placement(a.placement);
  if (a.ranks != -1 && a.ranks < 1) throw Error(fmt::format("--ranks: expected a whole number >= 1, got {}", a.ranks));
  o.world.ranks = a.ranks;
  o.batch = a.batch, o.heads = a.heads, o.head_dim = a.head_dim;
  if (a.sweep && !a.seqs.empty()) throw Error("--sweep and --seq: both given; expected one of them");
  o.seqs = a.sweep ? default_sweep() : a.seqs.empty() ? std::vector<int64_t>{4096} : a.seqs;
  for (const auto& v : a.variants) o.variants.push_back(parse_ulysses_variant(v));
  for (const auto& s : a.stores) o.stores.push_back(parse_store_path(s));
  for (const auto& t : a.orders) o.orders.push_back(parse_tile_order(t));
  for (const auto& f : a.flags) {
    // Coupled completion is a variant of its own, not a timing of fused's flags.
    if (f == "coupled")
      throw Error("--flags coupled: expected lagged, eager or at-exit (coupled completion is --variants coupled)");
    o.flags.push_back(parse_completion(f));
  }
  for (const auto& v : a.a2a) o.a2a.push_back(parse_a2a_version(v));
  o.chunks = a.chunks;
  o.row_chunks = a.row_chunks;
  o.pipeline_graph = a.pipeline_graph == "on";
  o.floor_probe = a.floor_probe;
  o.paced_rows = a.paced_rows;
  o.iters = a.iters, o.warmup = a.warmup, o.max_seconds_per_point = a.max_seconds;
  if (a.pairing != "adjacent" && a.pairing != "settled")
    throw Error(fmt::format("--pairing: expected adjacent or settled, got '{}'", a.pairing));
  o.settled_pairs = a.pairing == "settled";
  o.timeline = a.timeline;
  o.check = a.check, o.check_rows = a.check_rows, o.seed = a.seed, o.timeout_s = a.timeout_s;
  o.profile = a.profile;
  o.local_profile = a.local_profile;
  o.dump_dir = a.dump_dir;
  o.kernel = parse_attention_kernel(a.kernel);
  validate_ulysses_options(o);
  return o;
}

std::string fixed(double v, int digits) { return fmt::format("{:.{}f}", v, digits); }

// How the report was timed (ulysses_bench.cpp): paired with attention-only when it ran.
std::string timing_note(const UlyssesBenchReport& rep, const UlyssesBenchOptions& o) {
  const bool paired = std::any_of(rep.rows.begin(), rep.rows.end(),
                                  [](const UlyssesBenchRow& r) { return r.variant == "attention-only"; });
  const std::string rounds = fmt::format(
      "up to {} rounds (fewer, at least 3, when a round is longer than {} s per configuration), each running every "
      "configuration once back to back",
      o.iters, o.max_seconds_per_point);
  if (!paired)
    return fmt::format("interleaved: {}, after {} warm-up round(s); CUDA events; time_us is the median over rounds",
                       rounds, o.warmup);
  return fmt::format("paired, interleaved: {}, each right after an attention-only run{}, after {} warm-up "
                     "round(s); CUDA events; time_us is the median over runs, residuals the median of each run's "
                     "ratio to the attention-only run just before it; the best configuration of a variant is the "
                     "one of least residual",
                     rounds, o.settled_pairs ? " that itself follows an attention-only run (settled pairs)" : "",
                     o.warmup);
}

// The report: the same keys on every run (docs/cli-output.md). A value a run
// did not produce is null (a variant not run, a residual without its
// attention-only run, a label that does not apply: "-" in the tables), a list
// of rounds without rounds is empty.
nlohmann::json to_json(const UlyssesBenchReport& rep, const UlyssesBenchOptions& o) {
  const nlohmann::json none;
  auto opt = [&](const std::optional<double>& v) { return v ? nlohmann::json(*v) : none; };
  auto label = [&](const std::string& v) { return v == "-" ? none : nlohmann::json(v); };
  auto time = [&](double us) { return us > 0 ? nlohmann::json(us) : none; };
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : rep.rows)
    rows.push_back({{"variant", r.variant}, {"placement", r.placement}, {"backend", r.backend}, {"P", r.P}, {"B", r.B},
                    {"S", r.S}, {"H", r.H}, {"D", r.D}, {"store", label(r.store)}, {"order", label(r.order)},
                    {"flags", label(r.flags)}, {"a2a", label(r.a2a)}, {"paced_rows", r.paced_rows},
                    {"chunks", r.chunks > 0 ? nlohmann::json(r.chunks) : none},
                    {"row_chunks", r.row_chunks > 0 ? nlohmann::json(r.row_chunks) : none},
                    {"graph", r.variant == "pipelined" ? nlohmann::json(r.graph) : none}, {"time_us", r.time_us},
                    {"time_min_us", r.time_min_us}, {"time_max_us", r.time_max_us}, {"enqueue_us", r.enqueue_us},
                    {"iters", r.iters}, {"check", label(r.check)}, {"predicted_time_us", opt(r.predicted_time_us)},
                    {"residual_paired", opt(r.residual_paired)}});
  nlohmann::json summary = nlohmann::json::array();
  for (const auto& s : rep.summary) {
    const bool att = s.attention_only_us > 0, fused = s.fused_us > 0, coupled = s.coupled_us > 0;
    const bool seq = s.sequential_us > 0, pipe = s.pipelined_us > 0, floor = s.floor_us > 0;
    const bool predicted = s.predicted_fused_us > 0;
    nlohmann::json all = nlohmann::json::array();  // every pipelined configuration of this S
    for (const auto& r : rep.rows)
      if (r.S == s.S && r.variant == "pipelined")
        all.push_back({{"a2a", r.a2a}, {"chunks", r.chunks}, {"row_chunks", r.row_chunks}, {"graph", r.graph},
                       {"time_us", r.time_us}, {"time_min_us", r.time_min_us},
                       {"time_max_us", r.time_max_us}, {"enqueue_us", r.enqueue_us},
                       {"residual_paired", opt(r.residual_paired)}});
    const nlohmann::json selection =
        s.pipelined_configs > 0
            ? nlohmann::json(fmt::format("best of {} configurations (all-to-all version x head chunks a rank x row "
                                         "chunks), by "
                                         "least {}; every configuration's time is in pipelined_all and rows",
                                         s.pipelined_configs,
                                         s.residual_pipelined_rounds.empty() ? "median time" : "paired residual"))
            : none;
    summary.push_back(
        {{"S", s.S},
         {"attention_only_us", time(s.attention_only_us)},
         {"sequential_us", time(s.sequential_us)},
         {"pipelined_us", time(s.pipelined_us)},
         {"fused_us", time(s.fused_us)},
         {"coupled_us", time(s.coupled_us)},
         {"fused_config", fused ? nlohmann::json(s.fused_config) : none},
         {"sequential_a2a", seq ? nlohmann::json(s.sequential_a2a) : none},
         {"pipelined_a2a", pipe ? nlohmann::json(s.pipelined_a2a) : none},
         {"pipelined_chunks", pipe ? nlohmann::json(s.pipelined_chunks) : none},
         {"pipelined_row_chunks", pipe ? nlohmann::json(s.pipelined_row_chunks) : none},
         {"sequential_configs", s.sequential_configs},
         {"pipelined_configs", s.pipelined_configs},
         {"fused_configs", s.fused_configs},
         {"pipelined_selection", selection},
         {"pipelined_all", all},
         {"speedup_fused_over_sequential", fused && seq ? nlohmann::json(s.speedup()) : none},
         {"speedup_fused_over_pipelined", fused && pipe ? nlohmann::json(s.speedup_over_pipelined()) : none},
         {"residual_fused", fused && att ? nlohmann::json(s.residual()) : none},
         {"residual_pipelined", pipe && att ? nlohmann::json(s.pipelined_residual()) : none},
         {"residual_coupled", coupled && att ? nlohmann::json(s.coupled_residual()) : none},
         {"residual_fused_rounds", s.residual_fused_rounds},
         {"residual_pipelined_rounds", s.residual_pipelined_rounds},
         {"residual_coupled_rounds", s.residual_coupled_rounds},
         {"payload_bytes", s.payload_bytes > 0 ? nlohmann::json(s.payload_bytes) : none},
         {"floor_us", floor ? nlohmann::json(s.floor_us) : none},
         {"fused_over_floor", floor && fused ? nlohmann::json(s.fused_over_floor()) : none},
         {"fused_over_floor_paired", floor && fused && att ? nlohmann::json(s.fused_over_floor_paired()) : none},
         {"predicted_fused_us", predicted ? nlohmann::json(s.predicted_fused_us) : none},
         {"predicted_residual", predicted && att ? nlohmann::json(s.predicted_residual()) : none},
         {"predicted_sequential_us", predicted ? nlohmann::json(s.predicted_sequential_us) : none},
         {"rel_err", s.rel_err >= 0 ? nlohmann::json(s.rel_err) : none}});
  }
  nlohmann::json floor = nullptr;
  if (rep.floor) {
    const UlyssesFloorRate& f = *rep.floor;
    floor = {{"R_Bps", f.R_Bps}, {"source", f.source}, {"profile", f.profile}, {"transport", f.transport},
             {"definition", "floor_us = max(attention_only_us, payload_bytes / R): payload_bytes is what one GPU "
                            "sends over the probed path"}};
    const bool probed = f.source == "probe";
    floor["probe_samples"] = probed ? nlohmann::json(f.samples) : nlohmann::json(nullptr);
    floor["probe_seconds"] = probed ? nlohmann::json(f.probe_seconds) : nlohmann::json(nullptr);
    floor["probe"] = probed ? "xstage probe's quick sweep (training and completion points), run and fitted in this "
                              "process before the sweep"
                            : "none in this run: R is the prediction profile's";
  }
  return {{"tool", "xstage ulysses"},
          {"device", rep.device.name},
          {"driver", rep.device.driver},
          {"sm_clock_mhz", rep.device.sm_clock_mhz},
          {"date", utc_now_iso()},
          {"commit", build_commit()},
          {"command", command_line()},
          {"world", rep.world},
          {"kernel", rep.kernel},
          {"profile", rep.profile},
          {"local_profile", rep.local_profile},
          {"block_m", rep.block_m},
          {"concurrent_tiles", rep.tiles_concurrent},
          {"timing", timing_note(rep, o)},
          {"floor", floor},
          {"notes", rep.notes},
          {"rows", rows},
          {"summary", summary}};
}

// One row per S, every time in microseconds, for --summary-csv; empty cells
// where a variant did not run (or no floor rate was known).
std::string summary_csv(const UlyssesBenchReport& rep) {
  Table t({"S", "attention_only_us", "sequential_us", "sequential_a2a", "sequential_configs", "pipelined_us",
           "pipelined_a2a", "pipelined_chunks", "pipelined_row_chunks", "pipelined_configs", "fused_us", "fused_config", "fused_configs",
           "coupled_us", "speedup_fused_over_sequential", "speedup_fused_over_pipelined", "residual_fused",
           "residual_pipelined", "predicted_residual", "floor_us", "fused_over_floor", "fused_over_floor_paired",
           "floor_R_Bps", "floor_source"});
  auto num = [](bool have, double v, int digits) { return have ? fixed(v, digits) : std::string(); };
  for (const auto& x : rep.summary) {
    const bool att = x.attention_only_us > 0, seq = x.sequential_us > 0, pipe = x.pipelined_us > 0,
               fused = x.fused_us > 0, floor = x.floor_us > 0;
    t.add({std::to_string(x.S), num(att, x.attention_only_us, 3), num(seq, x.sequential_us, 3), x.sequential_a2a,
           std::to_string(x.sequential_configs), num(pipe, x.pipelined_us, 3), x.pipelined_a2a,
           pipe ? std::to_string(x.pipelined_chunks) : "", pipe ? std::to_string(x.pipelined_row_chunks) : "",
           std::to_string(x.pipelined_configs),
           num(fused, x.fused_us, 3), x.fused_config, std::to_string(x.fused_configs), num(x.coupled_us > 0, x.coupled_us, 3),
           num(fused && seq, x.speedup(), 4), num(fused && pipe, x.speedup_over_pipelined(), 4),
           num(fused && att, x.residual(), 5), num(pipe && att, x.pipelined_residual(), 5),
           num(x.predicted_fused_us > 0 && att, x.predicted_residual(), 5), num(floor, x.floor_us, 3),
           num(floor && fused, x.fused_over_floor(), 5), num(floor && fused && att, x.fused_over_floor_paired(), 5),
           num(rep.floor.has_value(), rep.floor ? rep.floor->R_Bps : 0, 0),
           rep.floor ? rep.floor->source : ""});
  }
  return t.csv();
}

void run_ulysses(const UlyssesArgs& a) {
  const UlyssesBenchOptions o = to_options(a);
  // Every output checked before the GPU work, no two onto one file; --dump's
  // arrays (q, k, v, o .npy) go through the one writer into its folder.
  detail::check_outputs({{a.out_file, a.out_file.empty() ? "" : "-o"},
                         {a.summary_csv, a.summary_csv.empty() ? "" : "--summary-csv"},
                         {a.timeline, a.timeline.empty() ? "" : "--timeline"}});
  if (!a.dump_dir.empty()) {
    detail::prepare_output_dir(a.dump_dir, "--dump", "q.npy");
    std::vector<detail::NamedOutput> all = {{a.out_file, a.out_file.empty() ? "" : "-o"},
                                            {a.summary_csv, a.summary_csv.empty() ? "" : "--summary-csv"},
                                            {a.timeline, a.timeline.empty() ? "" : "--timeline"}};
    for (const char* name : {"q", "k", "v", "o"}) all.push_back({a.dump_dir + "/" + name + ".npy", "--dump"});
    detail::check_outputs(all);
  }
  const UlyssesBenchReport rep = run_ulysses_bench(o);
  if (!rep.leader) return;
  const nlohmann::json j = to_json(rep, o);
  if (!a.out_file.empty()) detail::write_file_replacing(a.out_file, j.dump(2) + "\n", "-o");
  if (!a.summary_csv.empty()) detail::write_file_replacing(a.summary_csv, summary_csv(rep), "--summary-csv");
  switch (a.out.format()) {
    case Format::json: std::cout << j.dump(2) << "\n"; return;
    case Format::csv: {  // the rows, as --json has them
      nlohmann::json rows = j["rows"];
      std::cout << csv_of({"variant", "placement", "backend", "P", "B", "S", "H", "D", "store", "order", "flags", "a2a",
                           "paced_rows", "chunks", "row_chunks", "graph", "time_us", "time_min_us", "time_max_us",
                           "enqueue_us", "iters",
                           "check", "predicted_time_us", "residual_paired"},
                          rows);
      return;
    }
    case Format::table: break;
  }
  std::cout << fmt::format("{} ({}): {}; {} attention kernel; prediction from profile {} (local store: {})\n",
                           rep.device.name, rep.device.driver, rep.world, rep.kernel, rep.profile, rep.local_profile);
  Table t({"S", "variant", "store", "order", "flags", "a2a", "chunks", "time", "predicted", "paired", "iters",
           "check"});
  for (const auto& r : rep.rows)
    t.add({std::to_string(r.S), r.variant, r.paced_rows > 0 ? fmt::format("{}({})", r.store, r.paced_rows) : r.store,
           r.order, r.flags, r.a2a, r.chunks > 0 ? fmt::format("{}x{}", r.chunks, r.row_chunks) : "-",
           format_ns(r.time_us * 1e3),
           r.predicted_time_us ? format_ns(*r.predicted_time_us * 1e3) : "-",
           r.residual_paired ? fmt::format("{:+.1f}%", 100 * *r.residual_paired) : "-", std::to_string(r.iters), r.check});
  std::cout << t.text() << "\n";
  // Each best-of-N names its N: the least of N configurations is biased low.
  Table s({"S", "attn-only", "sequential", "pipelined", "fused", "coupled", "fused/seq", "fused/pipe", "residual",
           "pred. residual", "coupled residual", "floor", "fused/floor"});
  for (const auto& x : rep.summary) {
    auto pct = [](double v) { return fmt::format("{:.1f}%", 100 * v); };
    const bool f = x.fused_us > 0 && x.attention_only_us > 0;
    s.add({std::to_string(x.S), format_ns(x.attention_only_us * 1e3),
           x.sequential_us > 0 ? fmt::format("{} {} (best of {})", format_ns(x.sequential_us * 1e3), x.sequential_a2a,
                                             x.sequential_configs)
                               : "-",
           x.pipelined_us > 0 ? fmt::format("{} {}/{}x{} (best of {})", format_ns(x.pipelined_us * 1e3),
                                            x.pipelined_a2a, x.pipelined_chunks, x.pipelined_row_chunks,
                                            x.pipelined_configs)
                              : "-",
           x.fused_us > 0 ? fmt::format("{} {} (best of {})", format_ns(x.fused_us * 1e3), x.fused_config,
                                        x.fused_configs)
                          : "-",
           x.coupled_us > 0 ? format_ns(x.coupled_us * 1e3) : "-",
           x.fused_us > 0 && x.sequential_us > 0 ? fmt::format("{:.2f}x", x.speedup()) : "-",
           x.fused_us > 0 && x.pipelined_us > 0 ? fmt::format("{:.2f}x", x.speedup_over_pipelined()) : "-",
           f ? pct(x.residual()) : "-", f && x.predicted_fused_us > 0 ? pct(x.predicted_residual()) : "-",
           x.coupled_us > 0 && x.attention_only_us > 0 ? pct(x.coupled_residual()) : "-",
           x.floor_us > 0 ? format_ns(x.floor_us * 1e3) : "-",
           x.floor_us > 0 && f ? fmt::format("{:+.1f}%", 100 * x.fused_over_floor_paired()) : "-"});
  }
  std::cout << s.text();
  for (const auto& n : rep.notes) std::cout << "note: " << n << "\n";
  if (rep.floor)
    std::cout << fmt::format("floor = max(attention-only, payload / R), R = {} from {} ({}{})\n",
                             format_rate(rep.floor->R_Bps),
                             rep.floor->source == "probe" ? "the probe in this process" : "the prediction profile",
                             rep.floor->profile,
                             rep.floor->source == "probe"
                                 ? fmt::format(", {} training rows, {:.0f} s", rep.floor->samples,
                                               rep.floor->probe_seconds)
                                 : ", not measured in this run");
  if (!a.out_file.empty()) std::cout << fmt::format("wrote {}\n", a.out_file);
}

}  // namespace

void add_ulysses_command(CLI::App& app) {
  auto a = std::make_shared<UlyssesArgs>();
  auto* sub = app.add_subcommand("ulysses", "Ulysses attention with the output all-to-all: attention-only, "
                                            "sequential, pipelined (head x row chunks, each sent while the "
                                            "next computes, one CUDA graph), fused (all-to-all in the epilogue) and coupled, over S");
  sub->add_option("--seq", a->seqs, "Total sequence lengths S (comma-separated; default 4096)")->delimiter(',');
  sub->add_flag("--sweep", a->sweep, "S = 4096, 8192, ..., 131072");
  sub->add_option("--batch", a->batch, "Batch B")->capture_default_str();
  sub->add_option("--heads", a->heads, "Heads H in total (a multiple of P)")->capture_default_str();
  sub->add_option("--head-dim", a->head_dim, "Head dimension D (64 or 128)")->capture_default_str();
  sub->add_option("--backend", a->backend, "emulated (P ranks on one GPU), peer, nccl")->capture_default_str();
  sub->add_option("--ranks", a->ranks, "Ranks P (default: emulated 8, peer every GPU, nccl WORLD_SIZE)");
  sub->add_option("--placement", a->placement,
                  "Output buffers in host (PCIe) or device memory (default: host when emulated, else device)");
  sub->add_option("--kernel", a->kernel,
                  "Attention kernel of every variant: wgmma (TMA + wgmma, ping-pong, 128-key tiles) or mma "
                  "(the first, mma.sync kernel)")
      ->capture_default_str();
  sub->add_option("--variants", a->variants, "Subset of attention-only,sequential,pipelined,fused,coupled")
      ->delimiter(',');
  sub->add_option("--chunks", a->chunks,
                  "Pipelined: head chunks a rank, one run per value, 1 .. H/P (with --row-chunks, every pair; "
                  "neither: at each S, head chunks 1, 2, 4, ... and H/P by row chunks 1, 2, 4, ..., at most 32 "
                  "chunks in all; the summary reports the best and of how many)")
      ->delimiter(',');
  sub->add_option("--row-chunks", a->row_chunks,
                  "Pipelined: row chunks of the sequence (query rows; starts on the kernel's tile rows), one run per "
                  "value; not with the nccl all-to-all")
      ->delimiter(',');
  sub->add_option("--pipeline-graph", a->pipeline_graph,
                  "Pipelined: replay each run as one CUDA graph (on) or enqueue it stream by stream (off)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  sub->add_option("--stores", a->stores, "Fused store paths: vector16,vector16-wt,vector16-cs,bulk,paced,paced-bulk,paced-warp (default vector16,bulk and paced-warp; paced with --kernel mma)")->delimiter(',');
  sub->add_option("--orders", a->orders, "Fused tile orders: linear,rotated (default both)")->delimiter(',');
  sub->add_option("--flags", a->flags, "Fused flag timing: lagged,eager,at-exit (default at-exit)")->delimiter(',');
  sub->add_option("--paced-rows", a->paced_rows,
                  fmt::format("Paced store path: the fewest rows a send carries, one run per value (default {})",
                              kDefaultPacedRows))
      ->delimiter(',');
  sub->add_option("--a2a", a->a2a,
                  "All-to-all versions of sequential and pipelined: copy-engine,store-kernel,nccl (default every "
                  "available one)")
      ->delimiter(',');
  sub->add_option("-n,--iters", a->iters,
                  "Timed rounds per point (the median); attention-only runs once before each other variant a round")
      ->capture_default_str();
  sub->add_option("-w,--warmup", a->warmup, "Untimed iterations first")->capture_default_str();
  sub->add_option("--max-seconds", a->max_seconds, "Fewer iterations (>= 3) when a point would take longer")
      ->capture_default_str();
  sub->add_option("--pairing", a->pairing,
                  "Paired timing: adjacent (attention-only, then the configuration) or settled (one more "
                  "attention-only run before each pair, so that both runs of a pair follow one)")
      ->capture_default_str();
  sub->add_option("--timeline", a->timeline,
                  "Also write every timed run, in the order it ran, as CSV to FILE (S, run, config, time_us, after)");
  sub->add_flag("--check", a->check, "Check every variant bit-exactly against the local results, and sampled rows "
                                     "against an fp64 CPU reference (relative error <= 1e-2)");
  sub->add_option("--check-rows", a->check_rows, "Rows per rank for the fp64 check")->capture_default_str();
  sub->add_option("--seed", a->seed, "Seed of the random inputs")->capture_default_str();
  sub->add_option("--timeout", a->timeout_s,
                  "Seconds the receiver wait may take before aborting (it starts during the kernel's last tiles)")
      ->capture_default_str();
  sub->add_option("--profile", a->profile, "Profile for the prediction (name or file; 'none': no prediction; "
                                           "default: the path's embedded profile)");
  sub->add_option("--local-profile", a->local_profile,
                  "Profile of the GPU's own memory, whose store T0 the attention-only time contains and the "
                  "prediction takes out of each tile (name or file; default: h200-local)");
  sub->add_option("--dump", a->dump_dir, "Write q, k, v and the assembled fused output of the first S (first "
                                         "store path, order and flag timing given) as .npy into DIR "
                                         "(bench/ulysses_vs_sdpa.py checks them with torch)");
  sub->add_flag("--floor-probe", a->floor_probe,
                "Measure the floor's drain rate R in this process before the sweep: the probe's quick sweep on the "
                "placement's path (host, local or peer; tens of seconds), fitted (default: the prediction "
                "profile's R)");
  sub->add_option("--summary-csv", a->summary_csv, "Also write the per-S summary as CSV to FILE");
  sub->add_option("-o,--output", a->out_file, "Also write the JSON report to FILE");
  add_output_flags(sub, a->out);
  sub->callback([a] { run_ulysses(*a); });
}

}  // namespace xstage::cli
