// xstage attn: one attention forward on the GPU (sm90_bf16_attention_fwd):
// inputs from .npy files or random from a seed, --check against an fp64 CPU
// reference, --bench timing with device events, --o writes O as float32 .npy.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <numeric>
#include <random>

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "util/npy.hpp"
#include "xstage/build_info.hpp"
#include "xstage/attention.hpp"
#include "xstage/device.hpp"
#include "xstage/error.hpp"

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

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(size_t n) { XSTAGE_CUDA(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T))); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct CudaEvent {
  cudaEvent_t e = nullptr;
  CudaEvent() { XSTAGE_CUDA(cudaEventCreate(&e)); }
  ~CudaEvent() { cudaEventDestroy(e); }
};

// Fast, platform-independent uniform values with unit variance.
void fill_random(std::vector<float>& x, uint64_t seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
  for (float& f : x) {
    s += 0x9e3779b97f4a7c15ull;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const double u = double(z >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
    f = static_cast<float>((2 * u - 1) * 1.7320508075688772);
  }
}

// Rounds to bf16 in place (the values the kernel sees) and returns the bits.
std::vector<uint16_t> to_bf16(std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    h[i] = float_to_bf16(x[i]);
    x[i] = bf16_to_float(h[i]);
  }
  return h;
}

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
      throw Error(fmt::format("--q and --k: {} mismatch: q has {}, k and v have {}", what[i], q.shape[qi[i]],
                              k.shape[qi[i]]));
  auto take = [&](const char* opt, int& field, size_t value) {
    if (a.sub->count(opt) > 0 && size_t(field) != value)
      throw Error(fmt::format("{} {}: the .npy files say {}", opt, field, value));
    field = int(value);
  };
  take("--B", a.B, q.shape[0]);
  take("--S", a.S, q.shape[1]);
  take("--S-kv", a.S_kv, k.shape[1]);
  take("--H", a.H, q.shape[2]);
  take("--D", a.D, q.shape[3]);
}

nlohmann::json num_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

void run_attn(AttnArgs& a) {
  // ---- everything that can be wrong with the arguments, before the GPU
  const bool files = !a.q_path.empty() || !a.k_path.empty() || !a.v_path.empty();
  if (files && (a.q_path.empty() || a.k_path.empty() || a.v_path.empty()))
    throw Error("--q, --k, --v: expected all three .npy files or none");
  NpyArray fq, fk, fv;
  if (files) {
    fq = read_npy(a.q_path);
    fk = read_npy(a.k_path);
    fv = read_npy(a.v_path);
    shapes_from_files(a, fq, fk, fv);
  }
  if (a.S_kv == 0 && a.sub->count("--S-kv") == 0) a.S_kv = a.S;
  AttentionForwardArgs args;
  args.B = a.B, args.H = a.H, args.S_q = a.S, args.S_kv = a.S_kv, args.D = a.D;
  args.scale = static_cast<float>(a.scale);
  args.kernel = parse_attention_kernel(a.kernel);
  try {
    validate_attention_args(args, false);
  } catch (const Error& e) {  // name the options, not the API fields
    std::string m = e.what();
    throw Error(fmt::format("{} (options --B --S --S-kv --H --D --scale)", m));
  }
  if (a.warmup < 0) throw Error(fmt::format("--warmup: expected >= 0, got {}", a.warmup));
  if (a.iters < 0) throw Error(fmt::format("--iters: expected >= 1 (or 0: automatic), got {}", a.iters));
  if (a.check_rows < 0) throw Error(fmt::format("--check-rows: expected >= 1 (or 0: automatic), got {}", a.check_rows));
  if (cuda_device_count() == 0) throw Error("attn: no CUDA device: this command runs the kernel on a GPU");

  // ---- inputs (rounded to bf16: the reference sees what the kernel sees)
  const size_t nq = size_t(a.B) * a.S * a.H * a.D, nkv = size_t(a.B) * a.S_kv * a.H * a.D;
  std::vector<float> q, k, v;
  if (files) {
    q = std::move(fq.data), k = std::move(fk.data), v = std::move(fv.data);
  } else {
    q.resize(nq), k.resize(nkv), v.resize(nkv);
    fill_random(q, a.seed * 3 + 0);
    fill_random(k, a.seed * 3 + 1);
    fill_random(v, a.seed * 3 + 2);
  }
  const std::vector<uint16_t> hq = to_bf16(q), hk = to_bf16(k), hv = to_bf16(v);
  const float scale = effective_scale(args);

  DeviceBuffer<uint16_t> dq(nq), dk(nkv), dv(nkv), d_o(nq);
  DeviceBuffer<float> dlse(size_t(a.B) * a.H * a.S);
  XSTAGE_CUDA(cudaMemcpy(dq.ptr, hq.data(), nq * 2, cudaMemcpyHostToDevice));
  XSTAGE_CUDA(cudaMemcpy(dk.ptr, hk.data(), nkv * 2, cudaMemcpyHostToDevice));
  XSTAGE_CUDA(cudaMemcpy(dv.ptr, hv.data(), nkv * 2, cudaMemcpyHostToDevice));
  args.q = dq.ptr, args.k = dk.ptr, args.v = dv.ptr, args.o = d_o.ptr;
  args.q_stride = args.o_stride = contiguous_bshd(a.S, a.H, a.D);
  args.k_stride = args.v_stride = contiguous_bshd(a.S_kv, a.H, a.D);
  args.lse = dlse.ptr;
  const DeviceInfo dev = device_info(0);

  // ---- one run on poisoned output (NaN bytes), timed with events
  XSTAGE_CUDA(cudaMemset(d_o.ptr, 0xff, nq * 2));
  XSTAGE_CUDA(cudaMemset(dlse.ptr, 0xff, size_t(a.B) * a.H * a.S * 4));
  CudaEvent e0, e1;
  XSTAGE_CUDA(cudaEventRecord(e0.e));
  attention_forward(args);
  XSTAGE_CUDA(cudaEventRecord(e1.e));
  XSTAGE_CUDA(cudaEventSynchronize(e1.e));
  XSTAGE_CUDA(cudaGetLastError());
  float first_ms = 0;
  XSTAGE_CUDA(cudaEventElapsedTime(&first_ms, e0.e, e1.e));

  std::vector<uint16_t> ho;
  std::vector<float> hlse;
  if (a.check || !a.o_path.empty()) {
    ho.resize(nq);
    hlse.resize(size_t(a.B) * a.H * a.S);
    XSTAGE_CUDA(cudaMemcpy(ho.data(), d_o.ptr, nq * 2, cudaMemcpyDeviceToHost));
    XSTAGE_CUDA(cudaMemcpy(hlse.data(), dlse.ptr, hlse.size() * 4, cudaMemcpyDeviceToHost));
  }
  if (!a.o_path.empty()) {
    std::vector<float> of(nq);
    for (size_t i = 0; i < nq; ++i) of[i] = bf16_to_float(ho[i]);
    write_npy(a.o_path, {size_t(a.B), size_t(a.S), size_t(a.H), size_t(a.D)}, of.data());
  }

  // ---- check: every element written (no NaN left), error against fp64 on a row subset
  double rel_err = NAN, max_abs = NAN, lse_max_abs = NAN;
  size_t unwritten = 0, rows_checked = 0;
  const size_t rows_total = size_t(a.B) * a.S * a.H;
  if (a.check) {
    for (uint16_t h : ho) unwritten += std::isfinite(bf16_to_float(h)) ? 0 : 1;
    for (float l : hlse) unwritten += std::isfinite(l) ? 0 : 1;
    size_t want = a.check_rows > 0 ? size_t(a.check_rows)
                                   : std::max<size_t>(64, size_t(2e9 / (4.0 * double(a.S_kv) * a.D)));
    want = std::min(want, rows_total);
    std::vector<size_t> rows(rows_total);
    std::iota(rows.begin(), rows.end(), size_t(0));
    if (want < rows_total) {
      std::mt19937_64 rng(a.seed);
      for (size_t i = 0; i < want; ++i) std::swap(rows[i], rows[i + rng() % (rows_total - i)]);
      rows.resize(want);
    }
    AttentionReference ref{a.B, a.H, a.S, a.S_kv, a.D, double(scale), q.data(), k.data(), v.data()};
    std::vector<double> out(a.D);
    double num = 0, den = 0;
    max_abs = lse_max_abs = 0;
    for (size_t r : rows) {  // r = (b * S + s) * H + h: the [B, S, H] row index
      const int h = int(r % a.H), s = int((r / a.H) % a.S), b = int(r / (size_t(a.H) * a.S));
      const double lse = ref.row(b, s, h, out.data());
      for (int d = 0; d < a.D; ++d) {
        const double got = bf16_to_float(ho[r * a.D + d]);
        const double diff = std::isfinite(got) ? got - out[d] : INFINITY;
        num += diff * diff;
        den += out[d] * out[d];
        max_abs = std::max(max_abs, std::fabs(diff));
      }
      const double got_lse = hlse[(size_t(b) * a.H + h) * a.S + s];
      lse_max_abs = std::max(lse_max_abs, std::isfinite(got_lse) ? std::fabs(got_lse - lse) : INFINITY);
    }
    rows_checked = rows.size();
    rel_err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  }

  // ---- bench: median of timed runs after warm-up
  int iters = 0;
  double median_ms = NAN, min_ms = NAN;
  if (a.bench) {
    args.lse = nullptr;  // what a user of the forward pass without backward would run
    iters = a.iters > 0 ? a.iters : std::clamp(int(std::ceil(500.0 / std::max(first_ms, 1e-3f))), 5, 100);
    for (int i = 0; i < a.warmup; ++i) attention_forward(args);
    std::vector<CudaEvent> ev(2 * size_t(iters));
    for (int i = 0; i < iters; ++i) {
      XSTAGE_CUDA(cudaEventRecord(ev[2 * i].e));
      attention_forward(args);
      XSTAGE_CUDA(cudaEventRecord(ev[2 * i + 1].e));
    }
    XSTAGE_CUDA(cudaDeviceSynchronize());
    XSTAGE_CUDA(cudaGetLastError());
    std::vector<float> ms(iters);
    for (int i = 0; i < iters; ++i) XSTAGE_CUDA(cudaEventElapsedTime(&ms[i], ev[2 * i].e, ev[2 * i + 1].e));
    std::sort(ms.begin(), ms.end());
    median_ms = iters % 2 ? ms[iters / 2] : 0.5 * (ms[iters / 2 - 1] + ms[iters / 2]);
    min_ms = ms.front();
  }
  const double flop = 4.0 * a.B * a.H * double(a.S) * a.S_kv * a.D;
  const double tflops = std::isfinite(median_ms) ? flop / (median_ms * 1e-3) / 1e12 : NAN;
  const bool pass = !a.check || (unwritten == 0 && rel_err <= 1e-2);

  if (a.out.format() == Format::json) {
    nlohmann::json j{{"B", a.B},
                     {"H", a.H},
                     {"S", a.S},
                     {"S_kv", a.S_kv},
                     {"D", a.D},
                     {"scale", scale},
                     {"kernel", attention_kernel_name(a.D, args.kernel)},
                     {"device", dev.name},
                     {"driver", dev.driver},
                     {"commit", build_commit()},
                     {"command", command_line()},
                     {"inputs", files ? "npy" : fmt::format("random seed {}", a.seed)},
                     {"flop", flop},
                     {"first_run_ms", first_ms}};
    if (a.bench) {
      j["iters"] = iters;
      j["warmup"] = a.warmup;
      j["median_ms"] = median_ms;
      j["min_ms"] = min_ms;
      j["tflops"] = num_or_null(tflops);
    }
    if (a.check) {
      j["rel_err"] = num_or_null(rel_err);
      j["max_abs_err"] = num_or_null(max_abs);
      j["lse_max_abs_err"] = num_or_null(lse_max_abs);
      j["rows_checked"] = rows_checked;
      j["rows_total"] = rows_total;
      j["unwritten"] = unwritten;
      j["check_pass"] = pass;
    }
    std::cout << j.dump(2) << "\n";
  } else {
    std::vector<std::string> head{"B", "H", "S", "S_kv", "D", "first_ms"};
    std::vector<std::string> row{std::to_string(a.B), std::to_string(a.H), std::to_string(a.S),
                                 std::to_string(a.S_kv), std::to_string(a.D), fmt::format("{:.3f}", first_ms)};
    if (a.bench) {
      head.insert(head.end(), {"iters", "median_ms", "TFLOP/s"});
      row.insert(row.end(), {std::to_string(iters), fmt::format("{:.4f}", median_ms), fmt::format("{:.1f}", tflops)});
    }
    if (a.check) {
      head.insert(head.end(), {"rows_checked", "rel_err", "max_abs", "lse_err", "unwritten"});
      row.insert(row.end(), {fmt::format("{}/{}", rows_checked, rows_total), fmt::format("{:.3e}", rel_err),
                             fmt::format("{:.3e}", max_abs), fmt::format("{:.3e}", lse_max_abs),
                             std::to_string(unwritten)});
    }
    Table t(head);
    t.add(row);
    if (a.out.format() == Format::csv) {
      std::cout << t.csv();
    } else {
      std::cout << fmt::format("{} on {}\n", attention_kernel_name(a.D, args.kernel), dev.name);
      std::cout << t.text();
    }
  }
  if (!pass)
    throw Error(fmt::format("attn --check failed: rel_err {:.3e} (limit 1e-2), {} elements not written", rel_err,
                            unwritten));
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
