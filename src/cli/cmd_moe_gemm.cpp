// xstage moe-gemm: the local MoE expert layer's grouped GEMMs on the GPU
// (L1 with its SwiGLU epilogue, L2, or both in sequence): inputs from .npy
// files or random from a seed, --check against an fp64 CPU reference on
// sampled rows, --bench timing with device events. The measurement is the
// library's (harness/moe/moe_bench.hpp); here the options, the model shapes, the
// files' shapes, and the printing.
#include <cmath>
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "harness/moe/moe_bench.hpp"
#include "util/npy.hpp"
#include "util/output_file.hpp"
#include "xstage/core/build_info.hpp"
#include "xstage/core/error.hpp"
#include "xstage/moe/moe_layer.hpp"

namespace xstage::cli {

namespace {

struct MoeArgs {
  std::string gemm = "layer", model;
  int hidden = 0, inter = 0, experts = 0, ep = 1, rows_per_expert = 128;
  std::vector<int> counts;
  bool uneven = false, routing_weights = false;
  std::string tile_l1 = "auto", tile_l2 = "auto", out_store = "auto";
  int tail_splits = 0;
  uint64_t seed = 1;
  bool check = false, bench = false;
  int warmup = 3, iters = 0, check_rows = 0;
  std::string x_path, h_path, w13_path, w2_path, weights_path, out_path;
  OutputFlags out;
  CLI::App* sub = nullptr;
};

std::vector<float> load(const std::string& path, const char* opt, const std::vector<size_t>& shape) {
  if (path.empty()) return {};
  NpyArray a = read_npy(path);
  if (a.shape != shape)
    throw Error(fmt::format("{} {}: expected shape [{}], got [{}]", opt, path, fmt::join(shape, ", "),
                            fmt::join(a.shape, ", ")));
  return std::move(a.data);
}


// One GEMM's results, the same fields on every run: the timing without
// --bench and the errors without --check are null.
nlohmann::json gemm_json(const MoeGemmReport& g, bool bench, bool check) {
  const nlohmann::json none;
  auto b = [&](const nlohmann::json& v) { return bench ? v : none; };
  auto c = [&](const nlohmann::json& v) { return check ? v : none; };
  return {{"tile", to_string(g.tile)},
          {"out_store", to_string(g.out_store)},
          {"flop", g.flop},
          {"first_run_ms", g.first_run_ms},
          {"median_ms", b(num_or_null(g.median_ms))},
          {"min_ms", b(num_or_null(g.min_ms))},
          {"tflops", b(num_or_null(g.tflops))},
          {"rel_err", c(num_or_null(g.rel_err))},
          {"max_abs_err", c(num_or_null(g.max_abs_err))},
          {"rows_checked", c(g.rows_checked)},
          {"elements_scanned", c(g.elements_scanned)},
          {"unwritten", c(g.unwritten)},
          {"check_pass", c(g.check_pass)}};
}

void run_moe_gemm(MoeArgs& a) {
  // ---- everything that can be wrong with the arguments, before the GPU
  // --out is written through the one writer after the GPU work: checked now,
  // against the inputs too.
  if (!a.out_path.empty())
    detail::check_output_path(a.out_path, "--out", {a.x_path, a.h_path, a.w13_path, a.w2_path, a.weights_path});
  MoeBenchOptions o;
  o.mode = parse_moe_bench_mode(a.gemm);
  if (!a.model.empty()) {
    // The layer's table of model shapes (moe_layer.hpp), one for every command.
    const auto known = find_known_moe_shape(a.model);
    if (!known) {
      std::vector<std::string> names;
      for (const MoeShape& k : moe_known_shapes()) names.push_back(k.name);
      throw Error(fmt::format("--model {}: expected one of {}", a.model, fmt::join(names, ", ")));
    }
    if (a.hidden == 0) a.hidden = known->hidden;
    if (a.inter == 0) a.inter = known->inter;
    if (a.experts == 0) a.experts = known->experts;
  }
  if (a.hidden == 0 || a.inter == 0) throw Error("--hidden and --inter (or --model): expected the layer's sizes");
  if (a.ep < 1) throw Error(fmt::format("--ep: expected >= 1, got {}", a.ep));
  if (!a.counts.empty()) {
    if (a.sub->count("--experts") > 0 && size_t(a.experts) != a.counts.size())
      throw Error(fmt::format("--counts: {} values, --experts says {}; expected one count per expert", a.counts.size(), a.experts));
    o.counts = a.counts;
  } else {
    if (a.experts < 1) throw Error(fmt::format("--experts: expected >= 1, got {}", a.experts));
    if (a.experts % a.ep != 0)
      throw Error(fmt::format("--ep {}: expected a divisor of the {} experts", a.ep, a.experts));
    if (a.rows_per_expert < 0) throw Error(fmt::format("--rows-per-expert: expected >= 0, got {}", a.rows_per_expert));
    o.counts = moe_expert_counts(a.experts / a.ep, a.rows_per_expert, a.uneven, a.seed);
  }
  o.hidden = a.hidden, o.inter = a.inter;
  o.routing_weights = a.routing_weights || !a.weights_path.empty();
  o.tile_l1 = parse_moe_tile(a.tile_l1), o.tile_l2 = parse_moe_tile(a.tile_l2);
  o.out_store = parse_moe_out_store(a.out_store);
  o.tail_splits = a.tail_splits;
  o.seed = a.seed, o.check = a.check, o.check_rows = a.check_rows;
  o.bench = a.bench, o.warmup = a.warmup, o.iters = a.iters, o.out_path = a.out_path;
  validate_moe_bench_options(o);
  const size_t E = o.counts.size(), rows = [&] {
    size_t s = 0;
    for (int c : o.counts) s += size_t(c);
    return s;
  }();
  const size_t H = size_t(a.hidden), I = size_t(a.inter);
  o.x = load(a.x_path, "--x", {rows, H});
  o.h = load(a.h_path, "--act", {rows, I});
  o.w13 = load(a.w13_path, "--w13", {E, 2 * I, H});
  o.w2 = load(a.w2_path, "--w2", {E, H, I});
  o.weights = load(a.weights_path, "--weights", {rows});
  const bool files = !o.x.empty() || !o.h.empty() || !o.w13.empty() || !o.w2.empty();
  const std::vector<int> counts = o.counts;  // rows of each local expert, as run

  const MoeBenchReport r = run_moe_bench(std::move(o));
  const bool l1 = r.has_l1, l2 = r.has_l2;
  const nlohmann::json none;
  if (a.out.format() == Format::json) {
    // The same keys on every run (docs/cli-output.md): a GEMM the mode did not
    // run, the timing without --bench and the check without --check are null.
    nlohmann::json j{{"gemm", a.gemm},
                     {"model", a.model.empty() ? none : nlohmann::json(a.model)},
                     {"hidden", a.hidden},
                     {"inter", a.inter},
                     {"experts", r.E},
                     {"ep", a.ep},
                     {"rows_total", r.rows_total},
                     {"counts", counts},
                     {"routing_weights", a.routing_weights || !a.weights_path.empty()},
                     {"device", r.device.name},
                     {"driver", r.device.driver},
                     {"commit", build_commit()},
                     {"command", command_line()},
                     {"inputs", files ? "npy" : fmt::format("random seed {}", a.seed)},
                     {"l1", l1 ? gemm_json(r.l1, a.bench, a.check) : none},
                     {"l2", l2 ? gemm_json(r.l2, a.bench, a.check) : none},
                     {"iters", a.bench ? nlohmann::json(r.iters) : none},
                     {"warmup", a.bench ? nlohmann::json(a.warmup) : none},
                     {"layer_median_ms", a.bench && l1 && l2 ? num_or_null(r.layer_median_ms) : none},
                     {"layer_tflops", a.bench && l1 && l2 ? num_or_null(r.layer_tflops) : none},
                     {"check_pass", a.check ? nlohmann::json(r.check_pass) : none}};
    std::cout << j.dump(2) << "\n";
  } else if (a.out.format() == Format::csv) {
    // One row per GEMM run: its fields, with the layer's shape.
    nlohmann::json rows = nlohmann::json::array();
    auto add = [&](const char* name, const MoeGemmReport& g, int K, int N) {
      nlohmann::json row = gemm_json(g, a.bench, a.check);
      row["gemm"] = name, row["M"] = r.rows_total, row["K"] = K, row["N"] = N;
      rows.push_back(row);
    };
    if (l1) add("l1", r.l1, a.hidden, 2 * a.inter);
    if (l2) add("l2", r.l2, a.inter, a.hidden);
    std::cout << csv_of({"gemm", "tile", "out_store", "M", "K", "N", "flop", "first_run_ms", "median_ms", "min_ms", "tflops",
                         "rel_err", "max_abs_err", "rows_checked", "elements_scanned", "unwritten", "check_pass"},
                        rows);
  } else {
    Table t({"gemm", "tile", "out_store", "M", "K", "N", "first_ms", "median_ms", "TFLOP/s", "rows_checked", "rel_err", "unwritten"});
    auto add = [&](const char* name, const MoeGemmReport& g, int K, int N) {
      t.add({name, to_string(g.tile), to_string(g.out_store), std::to_string(r.rows_total), std::to_string(K), std::to_string(N),
             fmt::format("{:.3f}", g.first_run_ms), a.bench ? fmt::format("{:.4f}", g.median_ms) : "-",
             a.bench ? fmt::format("{:.1f}", g.tflops) : "-",
             a.check ? std::to_string(g.rows_checked) : "-", a.check ? fmt::format("{:.3e}", g.rel_err) : "-",
             a.check ? std::to_string(g.unwritten) : "-"});
    };
    if (l1) add("L1+SwiGLU", r.l1, a.hidden, 2 * a.inter);
    if (l2) add("L2", r.l2, a.inter, a.hidden);
    std::cout << fmt::format("{} local experts, {} rows, on {}\n", r.E, r.rows_total, r.device.name);
    std::cout << t.text();
    if (a.bench && l1 && l2)
      std::cout << fmt::format("layer (L1 then L2): {:.4f} ms, {:.1f} TFLOP/s\n", r.layer_median_ms, r.layer_tflops);
  }
  if (!r.check_pass)
    throw Error(fmt::format("moe-gemm --check failed: L1 rel_err {:.3e}, {} unwritten; L2 rel_err {:.3e}, {} "
                            "unwritten; expected rel_err <= 1e-2 and 0 unwritten",
                            r.l1.rel_err, r.l1.unwritten, r.l2.rel_err, r.l2.unwritten));
}
}  // namespace

void add_moe_gemm_command(CLI::App& app) {
  auto a = std::make_shared<MoeArgs>();
  auto* sub = app.add_subcommand("moe-gemm", "MoE expert GEMMs on the GPU (bf16 grouped GEMMs, SwiGLU): check and benchmark");
  a->sub = sub;
  sub->add_option("--gemm", a->gemm, "l1 (with SwiGLU), l2, or layer (L1 then L2)")->capture_default_str();
  std::vector<std::string> names;
  for (const MoeShape& k : moe_known_shapes()) names.push_back(k.name);
  sub->add_option("--model", a->model, fmt::format("Shapes of a model: {} (xstage moe's --shape names)",
                                                   fmt::join(names, ", ")));
  sub->add_option("--hidden", a->hidden, "Hidden size (L1's K, L2's N)");
  sub->add_option("--inter", a->inter, "Expert intermediate size (L1's N is twice it, L2's K)");
  sub->add_option("--experts", a->experts, "Routed experts of the model");
  sub->add_option("--ep", a->ep, "Expert-parallel ranks: local experts = experts / ep")->capture_default_str();
  sub->add_option("--rows-per-expert", a->rows_per_expert, "Rows routed to each local expert")->capture_default_str();
  sub->add_flag("--uneven", a->uneven, "Uneven rows per expert (same total; some experts empty)");
  sub->add_option("--counts", a->counts, "Rows of each local expert (overrides --experts/--ep/--rows-per-expert)")
      ->delimiter(',');
  sub->add_flag("--routing-weights", a->routing_weights, "Scale L1's output by each row's routing weight");
  sub->add_option("--tile-l1", a->tile_l1,
                  "auto, m128n256, m64n256, m128n128, m128n128pp (ping-pong: staged store, no split-K)")
      ->capture_default_str();
  sub->add_option("--tile-l2", a->tile_l2,
                  "auto, m128n256, m64n256, m128n128, m64n80 (staged store only), m128n128pp (ping-pong: staged "
                  "store, no split-K)")
      ->capture_default_str();
  sub->add_option("--out-store", a->out_store,
                  "How the epilogue's output leaves shared memory: auto, staged (16-byte stores from warp "
                  "staging rows), bulk (the tile staged, one TMA bulk copy a row) or tma (each warp's 16 x 64 "
                  "boxes, double-buffered, one TMA tensor store a box)")
      ->capture_default_str();
  sub->add_option("--tail-splits", a->tail_splits,
                  "The last wave's tiles split their K over the SMs that would idle: 0 automatic, 1 never, N at "
                  "most N ways (both GEMMs)")
      ->capture_default_str();
  sub->add_option("--seed", a->seed, "Seed of the random inputs")->capture_default_str();
  sub->add_flag("--check", a->check, "Compare sampled rows with an fp64 CPU reference; scan for unwritten outputs");
  sub->add_option("--check-rows", a->check_rows, "Rows to compare per GEMM (default about 16)");
  sub->add_flag("--bench", a->bench, "Median time of many runs after warm-up (CUDA events), TFLOP/s");
  sub->add_option("--warmup", a->warmup, "Warm-up runs before timing")->capture_default_str();
  sub->add_option("--iters", a->iters, "Timed runs (default: about 0.5 s worth, 5..100)");
  sub->add_option("--x", a->x_path, "Tokens as .npy [rows, hidden] (float32 or float16), rows grouped by expert");
  sub->add_option("--act", a->h_path, "L2's input, the SwiGLU activations, as .npy [rows, inter] (--gemm l2)");
  sub->add_option("--w13", a->w13_path, "Gate and up weights .npy [experts, 2 inter, hidden]: gate rows, then up rows");
  sub->add_option("--w2", a->w2_path, "Down weights .npy [experts, hidden, inter]");
  sub->add_option("--weights", a->weights_path, "Routing weight of each row, .npy [rows] (implies --routing-weights)");
  sub->add_option("--out", a->out_path, "Write the last GEMM's output as float32 .npy");
  add_output_flags(sub, a->out);
  sub->callback([a] { run_moe_gemm(*a); });
}

}  // namespace xstage::cli
