#include "harness/moe/moe_bench.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "device/fill/fill_random.hpp"
#include "harness/moe/moe_check.hpp"
#include "runtime/core/device_buffer.hpp"
#include "util/npy.hpp"
#include "xstage/attention/attention.hpp"  // float_to_bf16, bf16_to_float
#include "xstage/core/error.hpp"

namespace xstage {

namespace {

// Fill streams of the random inputs (fill_random_value's `stream`).
enum : uint64_t { kStreamX = 0, kStreamW13 = 1, kStreamW2 = 2, kStreamH = 3 };

// One bf16 tensor on the device with, for the check, a way to read any of
// its elements on the host: the redrawn random value or the host copy.
struct Operand {
  DeviceBuffer<uint16_t> dev;
  std::vector<uint16_t> host;  // empty: random
  uint64_t seed = 0, stream = 0;
  Operand(size_t n, std::vector<float>& given, uint64_t seed_, uint64_t stream_, const char* name)
      : dev(n), seed(seed_), stream(stream_) {
    if (given.empty()) {
      XSTAGE_CUDA(fill::launch_fill_random_bf16(dev.ptr, n, seed, stream, 0, nullptr));
      return;
    }
    if (given.size() != n)
      throw Error(fmt::format("moe bench: {}: expected {} elements (the shape), got {}", name, n, given.size()));
    host.resize(n);
    for (size_t i = 0; i < n; ++i) host[i] = float_to_bf16(given[i]);
    XSTAGE_CUDA(cudaMemcpy(dev.ptr, host.data(), n * 2, cudaMemcpyHostToDevice));
  }
  float at(size_t i) const {
    return host.empty() ? fill::fill_random_value(seed, stream, i) : bf16_to_float(host[i]);
  }
  // Elements first .. first + n as float.
  void read(size_t first, size_t n, float* out) const {
    for (size_t i = 0; i < n; ++i) out[i] = at(first + i);
  }
};

std::vector<uint16_t> interleave_host(const std::vector<uint16_t>& w13, int E, int I, int K) {
  std::vector<uint16_t> out(w13.size());
  moe_interleave_w13(w13.data(), out.data(), E, I, K);
  return out;
}

float timed_once(const std::function<void()>& body) {
  CudaEvent e0, e1;
  XSTAGE_CUDA(cudaEventRecord(e0.e));
  body();
  XSTAGE_CUDA(cudaEventRecord(e1.e));
  XSTAGE_CUDA(cudaEventSynchronize(e1.e));
  XSTAGE_CUDA(cudaGetLastError());
  float ms = 0;
  XSTAGE_CUDA(cudaEventElapsedTime(&ms, e0.e, e1.e));
  return ms;
}

}  // namespace

MoeBenchMode parse_moe_bench_mode(const std::string& s) {
  if (s == "l1") return MoeBenchMode::l1;
  if (s == "l2") return MoeBenchMode::l2;
  if (s == "layer") return MoeBenchMode::layer;
  throw Error(fmt::format("--gemm {}: expected l1, l2 or layer", s));
}

std::string to_string(MoeBenchMode m) {
  return m == MoeBenchMode::l1 ? "l1" : m == MoeBenchMode::l2 ? "l2" : "layer";
}

std::vector<int> moe_expert_counts(int E, int rows, bool uneven, uint64_t seed) {
  std::vector<int> c(size_t(std::max(E, 0)), rows);
  if (!uneven || E < 2) return c;
  // Move rows between experts: every fourth expert gives all its rows away
  // (empty experts), the others get random shares, so most counts are no
  // multiple of any tile while the total stays E * rows.
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + 7);
  int64_t pool = 0;
  for (int e = 0; e < E; e += 4) pool += c[e], c[e] = 0;
  for (int e = 0; e < E; ++e) {
    if (e % 4 == 0) continue;
    const int take = int(rng() % (uint64_t(c[e]) + 1) / 2);  // up to half of its rows
    c[e] -= take, pool += take;
  }
  while (pool > 0) {
    const int e = int(rng() % uint64_t(E));
    if (e % 4 == 0) continue;
    const int give = int(std::min<int64_t>(pool, int64_t(rng() % uint64_t(std::max(rows, 1)) + 1)));
    c[e] += give, pool -= give;
  }
  return c;
}

void validate_moe_bench_options(const MoeBenchOptions& o) {
  if (o.counts.empty()) throw Error("moe bench: expected at least one expert (--experts >= 1)");
  for (size_t e = 0; e < o.counts.size(); ++e)
    if (o.counts[e] < 0) throw Error(fmt::format("moe bench: rows of expert {}: expected >= 0, got {}", e, o.counts[e]));
  const int64_t rows = std::accumulate(o.counts.begin(), o.counts.end(), int64_t(0));
  if (rows > (int64_t(1) << 24)) throw Error(fmt::format("moe bench: rows in all: expected <= 2^24, got {}", rows));
  // The grouped GEMMs' shapes (validate_moe_gemm_args): hidden is L1's K and
  // L2's N (a multiple of 16), inter L2's K and half L1's N (a multiple of 8).
  if (o.hidden < 16 || o.hidden % 16 != 0)
    throw Error(fmt::format("--hidden: expected a positive multiple of 16 (L2's N), got {}", o.hidden));
  if (o.inter < 8 || o.inter % 8 != 0)
    throw Error(fmt::format("--inter: expected a positive multiple of 8 (L1's N = 2 x inter: a multiple of 16), got {}",
                            o.inter));
  if (o.warmup < 0) throw Error(fmt::format("--warmup: expected >= 0, got {}", o.warmup));
  if (o.iters < 0) throw Error(fmt::format("--iters: expected >= 1 (or 0: automatic), got {}", o.iters));
  if (o.check_rows < 0) throw Error(fmt::format("--check-rows: expected >= 1 (or 0: automatic), got {}", o.check_rows));
  if (o.routing_weights && o.mode == MoeBenchMode::l2)
    throw Error("--routing-weights: expected --gemm l1 or layer (the weight scales L1's output)");
}

MoeBenchReport run_moe_bench(MoeBenchOptions o) {
  validate_moe_bench_options(o);
  if (cuda_device_count() == 0) throw Error("moe-gemm: no CUDA device: this command runs the kernels on a GPU; expected a machine with a GPU");
  MoeBenchReport r;
  r.device = device_info(0);
  const int E = int(o.counts.size()), Hd = o.hidden, I = o.inter;
  r.E = E;
  std::vector<int32_t> offs(E);
  int64_t acc = 0;
  for (int e = 0; e < E; ++e) offs[e] = int32_t(acc += o.counts[e]);
  const int rows = int(acc);
  r.rows_total = rows;
  r.has_l1 = o.mode != MoeBenchMode::l2;
  r.has_l2 = o.mode != MoeBenchMode::l1;

  DeviceBuffer<int32_t> d_offs(E);
  XSTAGE_CUDA(cudaMemcpy(d_offs.ptr, offs.data(), E * 4, cudaMemcpyHostToDevice));
  std::vector<float> weights = o.weights;
  DeviceBuffer<float> d_w(o.routing_weights ? rows : 0);
  if (o.routing_weights) {
    if (weights.empty()) {
      weights.resize(rows);
      std::mt19937_64 rng(o.seed + 11);
      for (float& w : weights) w = float(0.05 + 0.9 * double(rng() >> 11) / 9007199254740992.0);
    } else if (weights.size() != size_t(rows)) {
      throw Error(fmt::format("moe bench: weights: expected {} (rows), got {}", rows, weights.size()));
    }
    XSTAGE_CUDA(cudaMemcpy(d_w.ptr, weights.data(), rows * 4, cudaMemcpyHostToDevice));
  }

  // ---- operands (W13 from files is interleaved on the host: the kernel's layout)
  std::vector<float> none;
  Operand x(r.has_l1 ? size_t(rows) * Hd : 0, r.has_l1 ? o.x : none, o.seed, kStreamX, "x");
  Operand w13(r.has_l1 ? size_t(E) * 2 * I * Hd : 0, r.has_l1 ? o.w13 : none, o.seed, kStreamW13, "w13");
  if (!w13.host.empty()) {
    w13.host = interleave_host(w13.host, E, I, Hd);
    XSTAGE_CUDA(cudaMemcpy(w13.dev.ptr, w13.host.data(), w13.host.size() * 2, cudaMemcpyHostToDevice));
  }
  Operand w2(r.has_l2 ? size_t(E) * Hd * I : 0, r.has_l2 ? o.w2 : none, o.seed, kStreamW2, "w2");
  const bool l2_alone = o.mode == MoeBenchMode::l2;
  Operand h_in(l2_alone ? size_t(rows) * I : 0, l2_alone ? o.h : none, o.seed, kStreamH, "h");
  DeviceBuffer<uint16_t> d_h(r.has_l1 ? size_t(rows) * I : 0), d_y(r.has_l2 ? size_t(rows) * Hd : 0);
  const uint16_t* l2_a = l2_alone ? h_in.dev.ptr : d_h.ptr;

  MoeGemmArgs l1{MoeGemmKind::l1_swiglu, x.dev.ptr, w13.dev.ptr, d_h.ptr, d_offs.ptr,
                 o.routing_weights ? d_w.ptr : nullptr, rows, Hd, 2 * I, E, o.tile_l1};
  MoeGemmArgs l2{MoeGemmKind::l2, l2_a, w2.dev.ptr, d_y.ptr, d_offs.ptr, nullptr, rows, I, Hd, E, o.tile_l2};
  l1.out_store = l2.out_store = o.out_store;
  l1.tail_splits = l2.tail_splits = o.tail_splits;
  if (r.has_l1) validate_moe_gemm_args(l1), r.l1.tile = moe_resolved_tile(l1), r.l1.out_store = moe_resolved_out_store(l1);
  if (r.has_l2) validate_moe_gemm_args(l2), r.l2.tile = moe_resolved_tile(l2), r.l2.out_store = moe_resolved_out_store(l2);
  r.l1.flop = 2.0 * rows * Hd * 2.0 * I;
  r.l2.flop = 2.0 * rows * double(I) * Hd;

  // ---- one run of each on poisoned outputs (NaN bytes), then the check
  if (r.has_l1) {
    XSTAGE_CUDA(cudaMemset(d_h.ptr, 0xff, size_t(rows) * I * 2));
    r.l1.first_run_ms = timed_once([&] { moe_gemm(l1); });
  }
  if (r.has_l2) {
    XSTAGE_CUDA(cudaMemset(d_y.ptr, 0xff, size_t(rows) * Hd * 2));
    r.l2.first_run_ms = timed_once([&] { moe_gemm(l2); });
  }
  XSTAGE_CUDA(cudaDeviceSynchronize());

  if (o.check) {
    MoeCheckInputs ci{offs, o.seed, o.check_rows};
    if (r.has_l1) {
      auto a_row = [&](int row, float* out) { x.read(size_t(row) * Hd, Hd, out); };
      auto b_rows = [&](int e, float* out) { w13.read(size_t(e) * 2 * I * Hd, size_t(2) * I * Hd, out); };
      const MoeCheckResult c = check_moe_gemm(ci, MoeGemmKind::l1_swiglu, Hd, 2 * I, d_h.ptr, a_row, b_rows,
                                              o.routing_weights ? weights.data() : nullptr);
      r.l1.rel_err = c.rel_err, r.l1.max_abs_err = c.max_abs, r.l1.rows_checked = c.rows_checked;
      r.l1.unwritten = c.unwritten, r.l1.elements_scanned = c.elements_scanned;
      r.l1.check_pass = c.pass();
    }
    if (r.has_l2) {
      // L2's input as the GPU holds it: in the layer, L1's (already checked) output.
      std::vector<uint16_t> hrow(I);
      auto a_row = [&](int row, float* out) {
        if (l2_alone) return h_in.read(size_t(row) * I, I, out);
        XSTAGE_CUDA(cudaMemcpy(hrow.data(), d_h.ptr + size_t(row) * I, size_t(I) * 2, cudaMemcpyDeviceToHost));
        for (int i = 0; i < I; ++i) out[i] = bf16_to_float(hrow[i]);
      };
      auto b_rows = [&](int e, float* out) { w2.read(size_t(e) * Hd * I, size_t(Hd) * I, out); };
      const MoeCheckResult c = check_moe_gemm(ci, MoeGemmKind::l2, I, Hd, d_y.ptr, a_row, b_rows, nullptr);
      r.l2.rel_err = c.rel_err, r.l2.max_abs_err = c.max_abs, r.l2.rows_checked = c.rows_checked;
      r.l2.unwritten = c.unwritten, r.l2.elements_scanned = c.elements_scanned;
      r.l2.check_pass = c.pass();
    }
    r.check_pass = r.l1.check_pass && r.l2.check_pass;
  }

  if (!o.out_path.empty()) {
    const bool y = r.has_l2;
    const size_t cols = y ? Hd : I, n = size_t(rows) * cols;
    std::vector<uint16_t> hb(n);
    XSTAGE_CUDA(cudaMemcpy(hb.data(), y ? d_y.ptr : d_h.ptr, n * 2, cudaMemcpyDeviceToHost));
    std::vector<float> f(n);
    for (size_t i = 0; i < n; ++i) f[i] = bf16_to_float(hb[i]);
    write_npy(o.out_path, {size_t(rows), cols}, f.data());
  }

  if (o.bench) {
    const float first = (r.has_l1 ? r.l1.first_run_ms : 0) + (r.has_l2 ? r.l2.first_run_ms : 0);
    const int iters = o.iters > 0 ? o.iters : std::clamp(int(std::ceil(500.0 / std::max(first, 1e-3f))), 5, 100);
    r.iters = iters;
    if (r.has_l1) time_event_runs(o.warmup, iters, [&] { moe_gemm(l1); }, r.l1.median_ms, r.l1.min_ms);
    if (r.has_l2) time_event_runs(o.warmup, iters, [&] { moe_gemm(l2); }, r.l2.median_ms, r.l2.min_ms);
    for (MoeGemmReport* g : {&r.l1, &r.l2})
      g->tflops = std::isfinite(g->median_ms) && g->median_ms > 0 ? g->flop / (g->median_ms * 1e-3) / 1e12 : NAN;
    if (o.mode == MoeBenchMode::layer) {
      double fastest = 0;
      time_event_runs(o.warmup, iters, [&] { moe_gemm(l1), moe_gemm(l2); }, r.layer_median_ms, fastest);
      r.layer_tflops = (r.l1.flop + r.l2.flop) / (r.layer_median_ms * 1e-3) / 1e12;
    }
  }
  return r;
}

}  // namespace xstage
