#include "harness/moe/moe_layer_check.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "xstage/attention/attention.hpp"  // float_to_bf16, bf16_to_float
#include "xstage/moe/moe.hpp"

namespace xstage {

namespace {
float round_bf16(double v) { return bf16_to_float(float_to_bf16(float(v))); }

struct Pair {
  size_t token;  // index into `tokens`
  int slot;
  float weight;
};
}  // namespace

std::vector<std::vector<double>> moe_layer_reference(const MoeLayerHostInputs& in, const std::vector<MoeRoutes>& routes,
                                                     const std::vector<MoeRefToken>& tokens) {
  const int H = in.hidden, I = in.inter;
  // The (token, slot) pairs of each expert, so that a worker draws an expert's weights once.
  std::map<int, std::vector<Pair>> by_expert;
  int k = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const MoeRoutes& r = routes.at(tokens[i].rank);
    k = r.k;
    for (int j = 0; j < r.k; ++j) {
      const size_t at = size_t(tokens[i].token) * r.k + j;
      by_expert[r.ids.at(at)].push_back({i, j, r.weights.at(at)});
    }
  }
  std::vector<std::pair<int, std::vector<Pair>>> work(by_expert.begin(), by_expert.end());
  // rows[token][slot]: the expert's output row as the combine buffer holds it.
  std::vector<std::vector<std::vector<float>>> rows(tokens.size(), std::vector<std::vector<float>>(k));
  std::atomic<size_t> next{0};
  std::mutex failure_mutex;
  std::exception_ptr failure;
  auto worker = [&] {
    try {
      std::vector<float> w13(size_t(2) * I * H), w2(size_t(H) * I), x(H), h(I);
      std::vector<double> gate_up(2 * size_t(I)), hd(I), y(H);
      for (size_t n; (n = next++) < work.size();) {
        in.w13(work[n].first, w13.data());
        in.w2(work[n].first, w2.data());
        for (const Pair& p : work[n].second) {
          in.x_row(tokens[p.token].rank, tokens[p.token].token, x.data());
          moe_reference_row(x.data(), w13.data(), H, 2 * I, gate_up.data());
          moe_reference_swiglu(gate_up.data(), I, double(p.weight), hd.data());
          for (int i = 0; i < I; ++i) h[i] = round_bf16(hd[i]);
          moe_reference_row(h.data(), w2.data(), I, H, y.data());
          std::vector<float>& out = rows[p.token][p.slot];
          out.resize(H);
          for (int c = 0; c < H; ++c) out[c] = round_bf16(y[c]);
        }
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  };
  // Each worker holds one expert's weights (3 x inter x hidden floats).
  const unsigned threads = std::max(1u, std::min({std::thread::hardware_concurrency(), 8u, unsigned(work.size())}));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);

  std::vector<std::vector<double>> out(tokens.size(), std::vector<double>(H, 0.0));
  for (size_t i = 0; i < tokens.size(); ++i)
    for (int j = 0; j < k; ++j)
      for (int c = 0; c < H; ++c) out[i][c] += rows[i][j][c];
  return out;
}

void moe_compare_rows(const std::vector<std::vector<double>>& ref, const std::vector<std::vector<uint16_t>>& got,
                      double& rel_err, double& max_abs) {
  double num = 0, den = 0;
  max_abs = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    for (size_t c = 0; c < ref[i].size(); ++c) {
      const double g = bf16_to_float(got.at(i).at(c));
      const double diff = std::isfinite(g) ? g - ref[i][c] : INFINITY;
      num += diff * diff;
      den += ref[i][c] * ref[i][c];
      max_abs = std::max(max_abs, std::fabs(diff));
    }
  rel_err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace xstage
