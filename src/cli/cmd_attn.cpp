// xstage attn: one attention forward on the GPU (sm90_bf16_attention_fwd):
// inputs from .npy files or random from a seed, --check against an fp64 CPU
// reference, --bench timing with device events, --o writes O as float32 .npy.
// The measurement is the library's (harness/attention/attention_bench.hpp); here the
// options, the shapes of the files, and the printing.
#include <cmath>
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "harness/attention/attention_bench.hpp"
#include "util/npy.hpp"
#include "util/output_file.hpp"
#include "xstage/core/build_info.hpp"
#include "xstage/core/error.hpp"

namespace xstage::cli {

namespace {
struct AttnArgs {
  int B = 1, S = 1024, S_kv = 0, H = 8, D = 128;
  double scale = NAN;
  uint64_t seed = 1;
  bool check = false, bench = false;
  int warmup = 5, iters = 0, check_rows = 0;
  std::string q_path, k_path, v_path, o_path;
  std::string kernel = "auto";
  OutputFlags out;
  CLI::App* sub = nullptr;
};

void check_shape(const NpyArray& a, const std::string& path, const char* name) {
  if (a.shape.size() != 4)
    throw Error(fmt::format("--{} {}: expected a 4-d array [B, S, H, D], got {} dimensions", name, path,
                            a.shape.size()));
  for (size_t d : a.shape)
    if (d == 0 || d > size_t(1) << 30)
      throw Error(fmt::format("--{} {}: expected every dimension in 1 .. 2^30, got a dimension of {}", name, path, d));
}

// Shapes from the files; explicit --B/--S/--S-kv/--H/--D must agree.
void shapes_from_files(AttnArgs& a, const NpyArray& q, const NpyArray& k, const NpyArray& v) {
  check_shape(q, a.q_path, "q");
  check_shape(k, a.k_path, "k");
  check_shape(v, a.v_path, "v");
  if (k.shape != v.shape)
    throw Error(fmt::format("--k and --v: expected the same shape, got [{}] and [{}]", fmt::join(k.shape, ", "),
                            fmt::join(v.shape, ", ")));
  const char* what[] = {"B", "H", "D"};
  const int qi[] = {0, 2, 3};
  for (int i = 0; i < 3; ++i)
    if (q.shape[qi[i]] != k.shape[qi[i]])
      throw Error(fmt::format("--q and --k: {} mismatch: q has {}, k and v have {}; expected the same size in q, k and v", what[i], q.shape[qi[i]],
                              k.shape[qi[i]]));
  auto take = [&](const char* opt, int& field, size_t value) {
    if (a.sub->count(opt) > 0 && size_t(field) != value)
      throw Error(fmt::format("{} {}: the .npy files say {}; expected the option to match the arrays or to be left out", opt, field, value));
    field = int(value);
  };
  take("--B", a.B, q.shape[0]);
  take("--S", a.S, q.shape[1]);
  take("--S-kv", a.S_kv, k.shape[1]);
  take("--H", a.H, q.shape[2]);
  take("--D", a.D, q.shape[3]);
}


// The fields of --json and the columns of --csv (docs/cli-output.md).
const std::vector<std::string> kAttnColumns = {
    "B", "H", "S", "S_kv", "D", "scale", "kernel", "device", "driver", "commit", "command", "inputs", "flop",
    "first_run_ms", "iters", "warmup", "median_ms", "min_ms", "tflops", "rel_err", "max_abs_err", "lse_max_abs_err",
    "rows_checked", "rows_total", "unwritten", "check_pass"};

void run_attn(AttnArgs& a) {
  // ---- everything that can be wrong with the arguments, before the GPU
  const bool files = !a.q_path.empty() || !a.k_path.empty() || !a.v_path.empty();
  if (files && (a.q_path.empty() || a.k_path.empty() || a.v_path.empty()))
    throw Error("--q, --k, --v: expected all three .npy files or none");
  // --o is written through the one writer (aside, renamed into place) after
  // the GPU work: a destination that cannot be written, or one of the
  // inputs, is refused now.
  if (!a.o_path.empty()) detail::check_output_path(a.o_path, "--o", {a.q_path, a.k_path, a.v_path});
  AttentionBenchOptions o;
  if (files) {
    NpyArray fq = read_npy(a.q_path), fk = read_npy(a.k_path), fv = read_npy(a.v_path);
    shapes_from_files(a, fq, fk, fv);
    o.q = std::move(fq.data), o.k = std::move(fk.data), o.v = std::move(fv.data);
  }
  if (a.S_kv == 0 && a.sub->count("--S-kv") == 0) a.S_kv = a.S;
  AttentionForwardArgs& args = o.shape;
  args.B = a.B, args.H = a.H, args.S_q = a.S, args.S_kv = a.S_kv, args.D = a.D;
  // NaN stands for "not given" (1/sqrt(D)); a NaN, infinite or non-positive
  // value typed by the user is an error, not the default.
  if (a.sub->count("--scale") && !(std::isfinite(a.scale) && a.scale > 0 && a.scale < 1e30))
    throw Error(fmt::format("--scale: expected a positive finite number, got {}", a.scale));
  args.scale = static_cast<float>(a.scale);
  args.kernel = parse_attention_kernel(a.kernel);
  try {
    validate_attention_args(args, false);
  } catch (const Error& e) {  // name the options, not the API fields
    std::string m = e.what();
    throw Error(fmt::format("{} (options --B --S --S-kv --H --D --scale); expected a shape the kernel runs (xstage attn --help)", m));
  }
  o.seed = a.seed, o.check = a.check, o.check_rows = a.check_rows;
  o.bench = a.bench, o.warmup = a.warmup, o.iters = a.iters, o.o_path = a.o_path;
  validate_attention_bench_options(o);

  const AttentionBenchReport r = run_attention_bench(std::move(o));
  const std::string kernel = attention_kernel_name(a.D, args.kernel);
  if (a.out.format() != Format::table) {
    // The same fields on every run (docs/cli-output.md): the timing without
    // --bench and the errors without --check are null (empty cells).
    const nlohmann::json none;
    auto bench = [&](const nlohmann::json& v) { return a.bench ? v : none; };
    auto check = [&](const nlohmann::json& v) { return a.check ? v : none; };
    const nlohmann::json j{{"B", a.B},
                           {"H", a.H},
                           {"S", a.S},
                           {"S_kv", a.S_kv},
                           {"D", a.D},
                           {"scale", r.scale},
                           {"kernel", kernel},
                           {"device", r.device.name},
                           {"driver", r.device.driver},
                           {"commit", build_commit()},
                           {"command", command_line()},
                           {"inputs", files ? "npy" : fmt::format("random seed {}", a.seed)},
                           {"flop", r.flop},
                           {"first_run_ms", r.first_run_ms},
                           {"iters", bench(r.iters)},
                           {"warmup", bench(a.warmup)},
                           {"median_ms", bench(num_or_null(r.median_ms))},
                           {"min_ms", bench(num_or_null(r.min_ms))},
                           {"tflops", bench(num_or_null(r.tflops))},
                           {"rel_err", check(num_or_null(r.rel_err))},
                           {"max_abs_err", check(num_or_null(r.max_abs_err))},
                           {"lse_max_abs_err", check(num_or_null(r.lse_max_abs_err))},
                           {"rows_checked", check(r.rows_checked)},
                           {"rows_total", check(r.rows_total)},
                           {"unwritten", check(r.unwritten)},
                           {"check_pass", check(r.check_pass)}};
    if (a.out.format() == Format::json)
      std::cout << j.dump(2) << "\n";
    else
      std::cout << csv_of(kAttnColumns, nlohmann::json::array({j}));
  } else {
    std::vector<std::string> head{"B", "H", "S", "S_kv", "D", "first_ms"};
    std::vector<std::string> row{std::to_string(a.B), std::to_string(a.H), std::to_string(a.S),
                                 std::to_string(a.S_kv), std::to_string(a.D), fmt::format("{:.3f}", r.first_run_ms)};
    if (a.bench) {
      head.insert(head.end(), {"iters", "median_ms", "TFLOP/s"});
      row.insert(row.end(),
                 {std::to_string(r.iters), fmt::format("{:.4f}", r.median_ms), fmt::format("{:.1f}", r.tflops)});
    }
    if (a.check) {
      head.insert(head.end(), {"rows_checked", "rel_err", "max_abs", "lse_err", "unwritten"});
      row.insert(row.end(), {fmt::format("{}/{}", r.rows_checked, r.rows_total), fmt::format("{:.3e}", r.rel_err),
                             fmt::format("{:.3e}", r.max_abs_err), fmt::format("{:.3e}", r.lse_max_abs_err),
                             std::to_string(r.unwritten)});
    }
    Table t(head);
    t.add(row);
    std::cout << fmt::format("{} on {}\n", kernel, r.device.name);
    std::cout << t.text();
  }
  if (!r.check_pass)
    throw Error(fmt::format("attn --check failed: rel_err {:.3e}, {} elements not written; expected rel_err <= 1e-2 and every element written", r.rel_err,
                            r.unwritten));
}
}  // namespace

void add_attn_command(CLI::App& app) {
  auto a = std::make_shared<AttnArgs>();
  auto* sub = app.add_subcommand("attn", "Attention forward on the GPU (bf16, [B, S, H, D]): check and benchmark");
  a->sub = sub;
  sub->add_option("--B", a->B, "Batch")->capture_default_str();
  sub->add_option("--S", a->S, "Query sequence length")->capture_default_str();
  sub->add_option("--S-kv", a->S_kv, "Key/value sequence length (default: --S)");
  sub->add_option("--H", a->H, "Heads")->capture_default_str();
  sub->add_option("--D", a->D, "Head dim: 64 or 128")->capture_default_str();
  sub->add_option("--scale", a->scale, "Softmax scale (default 1/sqrt(D))");
  sub->add_option("--seed", a->seed, "Seed of the random inputs")->capture_default_str();
  sub->add_flag("--check", a->check, "Compare with an fp64 CPU reference (a random subset of rows for big shapes)");
  sub->add_option("--check-rows", a->check_rows, "Rows to check (default: all, or as many as ~2 GFLOP allow)");
  sub->add_flag("--bench", a->bench, "Median time of many runs after warm-up (CUDA events), TFLOP/s");
  sub->add_option("--warmup", a->warmup, "Warm-up runs before timing")->capture_default_str();
  sub->add_option("--iters", a->iters, "Timed runs (default: about 0.5 s worth, 5..100)");
  sub->add_option("--q", a->q_path, "Q as .npy (float32 or float16, [B, S, H, D], C order)");
  sub->add_option("--k", a->k_path, "K as .npy ([B, S_kv, H, D])");
  sub->add_option("--v", a->v_path, "V as .npy ([B, S_kv, H, D])");
  sub->add_option("--o", a->o_path, "Write O as float32 .npy ([B, S, H, D])");
  sub->add_option("--kernel", a->kernel,
                  "auto, mma (FlashAttention-2 on mma.sync), wgmma (= wgmma-pingpong), wgmma-basic, wgmma-overlap, "
                  "wgmma-n192, wgmma-m192, wgmma-m192-overlap (D = 64)")
      ->capture_default_str();
  add_output_flags(sub, a->out);
  sub->callback([a] { run_attn(*a); });
}

}  // namespace xstage::cli
