#include "harness/moe/moe_check.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "xstage/attention/attention.hpp"  // bf16_to_float
#include "xstage/core/device.hpp"

namespace xstage {

namespace {
// Whole outputs up to this many elements are scanned for unwritten ones;
// above, the rows of the checked experts (copying tens of GB back costs more
// than the check is worth).
constexpr size_t kScanAllLimit = size_t(1) << 28;

size_t count_unwritten(const uint16_t* d, size_t first, size_t n) {
  std::vector<uint16_t> h(std::min<size_t>(n, size_t(1) << 24));
  size_t bad = 0;
  for (size_t done = 0; done < n; done += h.size()) {
    const size_t m = std::min(h.size(), n - done);
    XSTAGE_CUDA(cudaMemcpy(h.data(), d + first + done, m * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < m; ++i) bad += std::isfinite(bf16_to_float(h[i])) ? 0 : 1;
  }
  return bad;
}
}  // namespace

MoeCheckPlan moe_check_plan(const std::vector<int32_t>& offs, uint64_t seed, int rows) {
  const int E = int(offs.size());
  const int want = rows > 0 ? rows : 16;
  std::vector<int> nonempty;
  for (int e = 0; e < E; ++e)
    if (offs[e] - (e ? offs[e - 1] : 0) > 0) nonempty.push_back(e);
  MoeCheckPlan p;
  if (nonempty.empty()) return p;
  std::mt19937_64 rng(seed * 31 + 5);
  // The first and last experts with rows, the one whose last tile is most
  // ragged (count % 64 farthest from 0 and 64), a random one.
  std::set<int> pick{nonempty.front(), nonempty.back(), nonempty[rng() % nonempty.size()]};
  int ragged = nonempty.front(), best = -1;
  for (int e : nonempty) {
    const int c = offs[e] - (e ? offs[e - 1] : 0), rem = c % 64, score = std::min(rem, 64 - rem) + (rem ? 64 : 0);
    if (score > best) best = score, ragged = e;
  }
  pick.insert(ragged);
  p.experts.assign(pick.begin(), pick.end());
  const int per = std::max(1, (want + int(p.experts.size()) - 1) / int(p.experts.size()));
  for (int e : p.experts) {
    const int begin = e ? offs[e - 1] : 0, end = offs[e], c = end - begin;
    std::set<int> r{begin, end - 1, begin + (c / 64) * 64 + (c % 64) / 2 < end ? begin + (c / 64) * 64 + (c % 64) / 2
                                                                             : end - 1};
    while (int(r.size()) < std::min(per, c)) r.insert(begin + int(rng() % uint64_t(c)));
    p.rows.emplace_back(r.begin(), r.end());
  }
  return p;
}

MoeCheckResult check_moe_gemm(const MoeCheckInputs& in, MoeGemmKind kind, int K, int N, const uint16_t* d_out,
                              const std::function<void(int, float*)>& a_row,
                              const std::function<void(int, float*)>& b_rows, const float* row_weight) {
  const bool swiglu = kind == MoeGemmKind::l1_swiglu;
  const int n_out = swiglu ? N / 2 : N;
  const size_t rows_total = in.offs.empty() ? 0 : size_t(std::max(in.offs.back(), 0));
  MoeCheckResult c;
  const MoeCheckPlan plan = moe_check_plan(in.offs, in.seed, in.rows);
  if (rows_total * n_out <= kScanAllLimit) {
    c.elements_scanned = rows_total * n_out;
    c.unwritten = count_unwritten(d_out, 0, c.elements_scanned);
  } else {
    for (int e : plan.experts) {
      const size_t begin = e ? in.offs[e - 1] : 0, n = (in.offs[e] - begin) * size_t(n_out);
      c.unwritten += count_unwritten(d_out, begin * n_out, n);
      c.elements_scanned += n;
    }
  }
  std::vector<float> b(size_t(N) * K), a(K);
  std::vector<double> full(N), ref(n_out);
  std::vector<uint16_t> got(n_out);
  double num = 0, den = 0;
  for (size_t i = 0; i < plan.experts.size(); ++i) {
    b_rows(plan.experts[i], b.data());
    for (int row : plan.rows[i]) {
      a_row(row, a.data());
      moe_reference_row(a.data(), b.data(), K, N, full.data());
      if (swiglu)
        moe_reference_swiglu(full.data(), n_out, row_weight ? double(row_weight[row]) : 1.0, ref.data());
      else
        ref = full;
      XSTAGE_CUDA(cudaMemcpy(got.data(), d_out + size_t(row) * n_out, size_t(n_out) * 2, cudaMemcpyDeviceToHost));
      for (int n = 0; n < n_out; ++n) {
        const double g = bf16_to_float(got[n]);
        const double diff = std::isfinite(g) ? g - ref[n] : INFINITY;
        num += diff * diff;
        den += ref[n] * ref[n];
        c.max_abs = std::max(c.max_abs, std::fabs(diff));
      }
      ++c.rows_checked;
    }
  }
  c.rel_err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return c;
}

}  // namespace xstage
