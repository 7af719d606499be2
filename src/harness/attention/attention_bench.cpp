#include "harness/attention/attention_bench.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "runtime/core/device_buffer.hpp"
#include "util/npy.hpp"
#include "xstage/core/error.hpp"

namespace xstage {

namespace {

// Fast, platform-independent uniform values with unit variance.
void fill_uniform_unit_variance(std::vector<float>& x, uint64_t seed) {
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

void take_or_fill(std::vector<float>& x, size_t n, uint64_t seed, const char* name) {
  if (x.empty()) {
    x.resize(n);
    fill_uniform_unit_variance(x, seed);
  } else if (x.size() != n) {
    throw Error(fmt::format("attention bench: {}: expected {} elements (the shape), got {}", name, n, x.size()));
  }
}

struct CheckResult {
  double rel_err = 0, max_abs = 0, lse_max_abs = 0;
  size_t unwritten = 0, rows_checked = 0;
};

// Every element written (no NaN left), error against fp64 on a row subset.
CheckResult check_against_reference(const AttentionBenchOptions& o, const AttentionForwardArgs& a, float scale,
                                    const std::vector<uint16_t>& ho, const std::vector<float>& hlse,
                                    size_t rows_total) {
  CheckResult c;
  for (uint16_t h : ho) c.unwritten += std::isfinite(bf16_to_float(h)) ? 0 : 1;
  for (float l : hlse) c.unwritten += std::isfinite(l) ? 0 : 1;
  size_t want = o.check_rows > 0 ? size_t(o.check_rows)
                                 : std::max<size_t>(64, size_t(2e9 / (4.0 * double(a.S_kv) * a.D)));
  want = std::min(want, rows_total);
  std::vector<size_t> rows(rows_total);
  std::iota(rows.begin(), rows.end(), size_t(0));
  if (want < rows_total) {
    std::mt19937_64 rng(o.seed);
    for (size_t i = 0; i < want; ++i) std::swap(rows[i], rows[i + rng() % (rows_total - i)]);
    rows.resize(want);
  }
  AttentionReference ref{a.B, a.H, a.S_q, a.S_kv, a.D, double(scale), o.q.data(), o.k.data(), o.v.data()};
  std::vector<double> out(a.D);
  double num = 0, den = 0;
  for (size_t r : rows) {  // r = (b * S + s) * H + h: the [B, S, H] row index
    const int h = int(r % a.H), s = int((r / a.H) % a.S_q), b = int(r / (size_t(a.H) * a.S_q));
    const double lse = ref.row(b, s, h, out.data());
    for (int d = 0; d < a.D; ++d) {
      const double got = bf16_to_float(ho[r * a.D + d]);
      const double diff = std::isfinite(got) ? got - out[d] : INFINITY;
      num += diff * diff;
      den += out[d] * out[d];
      c.max_abs = std::max(c.max_abs, std::fabs(diff));
    }
    const double got_lse = hlse[(size_t(b) * a.H + h) * a.S_q + s];
    c.lse_max_abs = std::max(c.lse_max_abs, std::isfinite(got_lse) ? std::fabs(got_lse - lse) : INFINITY);
  }
  c.rows_checked = rows.size();
  c.rel_err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return c;
}

void time_runs(const AttentionForwardArgs& args, int warmup, int iters, AttentionBenchReport& r) {
  double median = 0, fastest = 0;
  time_event_runs(warmup, iters, [&] { attention_forward(args); }, median, fastest);
  r.iters = iters;
  r.median_ms = median;
  r.min_ms = fastest;
}

}  // namespace

void validate_attention_bench_options(const AttentionBenchOptions& o) {
  if (o.warmup < 0) throw Error(fmt::format("--warmup: expected >= 0, got {}", o.warmup));
  if (o.iters < 0) throw Error(fmt::format("--iters: expected >= 1 (or 0: automatic), got {}", o.iters));
  if (o.check_rows < 0) throw Error(fmt::format("--check-rows: expected >= 1 (or 0: automatic), got {}", o.check_rows));
}

AttentionBenchReport run_attention_bench(AttentionBenchOptions o) {
  validate_attention_bench_options(o);
  if (cuda_device_count() == 0) throw Error("attn: no CUDA device: this command runs the kernel on a GPU; expected a machine with a GPU");
  AttentionForwardArgs args = o.shape;
  validate_attention_args(args, false);
  const int B = args.B, S = args.S_q, S_kv = args.S_kv, H = args.H, D = args.D;

  // ---- inputs (rounded to bf16: the reference sees what the kernel sees)
  const size_t nq = size_t(B) * S * H * D, nkv = size_t(B) * S_kv * H * D;
  const bool given = !o.q.empty() || !o.k.empty() || !o.v.empty();
  if (given && (o.q.empty() || o.k.empty() || o.v.empty()))
    throw Error("attention bench: q, k, v: expected all three inputs or none");
  take_or_fill(o.q, nq, o.seed * 3 + 0, "q");
  take_or_fill(o.k, nkv, o.seed * 3 + 1, "k");
  take_or_fill(o.v, nkv, o.seed * 3 + 2, "v");
  const std::vector<uint16_t> hq = to_bf16(o.q), hk = to_bf16(o.k), hv = to_bf16(o.v);

  AttentionBenchReport r;
  r.scale = effective_scale(args);
  const size_t rows_total = size_t(B) * S * H;
  DeviceBuffer<uint16_t> dq(nq), dk(nkv), dv(nkv), d_o(nq);
  DeviceBuffer<float> dlse(rows_total);
  XSTAGE_CUDA(cudaMemcpy(dq.ptr, hq.data(), nq * 2, cudaMemcpyHostToDevice));
  XSTAGE_CUDA(cudaMemcpy(dk.ptr, hk.data(), nkv * 2, cudaMemcpyHostToDevice));
  XSTAGE_CUDA(cudaMemcpy(dv.ptr, hv.data(), nkv * 2, cudaMemcpyHostToDevice));
  args.q = dq.ptr, args.k = dk.ptr, args.v = dv.ptr, args.o = d_o.ptr;
  args.q_stride = args.o_stride = contiguous_bshd(S, H, D);
  args.k_stride = args.v_stride = contiguous_bshd(S_kv, H, D);
  args.lse = dlse.ptr;
  r.device = device_info(0);

  // ---- one run on poisoned output (NaN bytes), timed with events
  XSTAGE_CUDA(cudaMemset(d_o.ptr, 0xff, nq * 2));
  XSTAGE_CUDA(cudaMemset(dlse.ptr, 0xff, rows_total * 4));
  CudaEvent e0, e1;
  XSTAGE_CUDA(cudaEventRecord(e0.e));
  attention_forward(args);
  XSTAGE_CUDA(cudaEventRecord(e1.e));
  XSTAGE_CUDA(cudaEventSynchronize(e1.e));
  XSTAGE_CUDA(cudaGetLastError());
  XSTAGE_CUDA(cudaEventElapsedTime(&r.first_run_ms, e0.e, e1.e));

  std::vector<uint16_t> ho;
  std::vector<float> hlse;
  if (o.check || !o.o_path.empty()) {
    ho.resize(nq);
    hlse.resize(rows_total);
    XSTAGE_CUDA(cudaMemcpy(ho.data(), d_o.ptr, nq * 2, cudaMemcpyDeviceToHost));
    XSTAGE_CUDA(cudaMemcpy(hlse.data(), dlse.ptr, hlse.size() * 4, cudaMemcpyDeviceToHost));
  }
  if (!o.o_path.empty()) {
    std::vector<float> of(nq);
    for (size_t i = 0; i < nq; ++i) of[i] = bf16_to_float(ho[i]);
    write_npy(o.o_path, {size_t(B), size_t(S), size_t(H), size_t(D)}, of.data());
  }

  r.rows_total = rows_total;
  if (o.check) {
    const CheckResult c = check_against_reference(o, args, r.scale, ho, hlse, rows_total);
    r.rel_err = c.rel_err, r.max_abs_err = c.max_abs, r.lse_max_abs_err = c.lse_max_abs;
    r.unwritten = c.unwritten, r.rows_checked = c.rows_checked;
    r.check_pass = c.unwritten == 0 && c.rel_err <= 1e-2;
  }

  if (o.bench) {
    args.lse = nullptr;  // what a user of the forward pass without backward would run
    const int iters =
        o.iters > 0 ? o.iters : std::clamp(int(std::ceil(500.0 / std::max(r.first_run_ms, 1e-3f))), 5, 100);
    time_runs(args, o.warmup, iters, r);
  }
  r.flop = 4.0 * B * H * double(S) * S_kv * D;
  r.tflops = std::isfinite(r.median_ms) ? r.flop / (r.median_ms * 1e-3) / 1e12 : NAN;
  return r;
}

}  // namespace xstage
