// Routing for xstage moe (src/harness/moe/moe_layer_bench.hpp): the tokens'
// top-k experts and weights drawn from a seed, what crosses ranks, and the
// tokens the check compares. Pure CPU.
#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include <fmt/format.h>

#include "harness/moe/moe_layer_bench.hpp"
#include "xstage/core/error.hpp"

namespace xstage {

namespace {

// Draws from the 64-bit generator only (the standard distributions differ
// between standard libraries; the check's redraws must not).
double uniform01(std::mt19937_64& g) { return double(g() >> 11) * (1.0 / 9007199254740992.0); }
int below(std::mt19937_64& g, int n) { return int(g() % uint64_t(n)); }
double gaussian(std::mt19937_64& g) {
  const double u = std::max(uniform01(g), 1e-300), v = uniform01(g);
  return std::sqrt(-2 * std::log(u)) * std::cos(6.283185307179586 * v);
}

// The experts in order of popularity (most popular first): drawn from the seed alone.
std::vector<int> popularity_order(int E, uint64_t seed) {
  std::vector<int> order(E);
  for (int e = 0; e < E; ++e) order[e] = e;
  std::mt19937_64 g(seed * 0xA24BAED4963EE407ull + 0x51);
  for (int i = E - 1; i > 0; --i) std::swap(order[i], order[below(g, i + 1)]);
  return order;
}

}  // namespace

MoeRouting parse_moe_routing(std::string_view text) {
  if (text == "uniform") return MoeRouting::uniform;
  if (text == "zipf") return MoeRouting::zipf;
  throw Error(fmt::format("--routing {}: expected uniform or zipf", text));
}

std::string to_string(MoeRouting r) { return r == MoeRouting::zipf ? "zipf" : "uniform"; }

MoeRoutes moe_make_routes(MoeRouting r, int E, int k, int P, int T, uint64_t seed, int rank) {
  if (E < 1 || k < 1 || k > E || P < 1 || E % P != 0 || T < 0)
    throw Error(fmt::format("moe routing: expected 1 <= k <= E, E a multiple of P, T >= 0; got E = {}, k = {}, "
                            "P = {}, T = {}",
                            E, k, P, T));
  MoeRoutes out;
  out.T = T, out.k = k;
  out.ids.resize(size_t(T) * k);
  out.weights.resize(size_t(T) * k);
  // Zipf(1): the cumulative weights 1 / (i + 1) over the popularity order.
  const std::vector<int> order = r == MoeRouting::zipf ? popularity_order(E, seed) : std::vector<int>{};
  std::vector<double> cdf;
  if (r == MoeRouting::zipf) {
    double acc = 0;
    for (int i = 0; i < E; ++i) cdf.push_back(acc += 1.0 / (i + 1));
  }
  std::mt19937_64 g(seed * 0x9E3779B97F4A7C15ull + uint64_t(rank) * 0x632BE59BD9B4E019ull + 17);
  auto draw = [&]() -> int {
    if (r == MoeRouting::uniform) return below(g, E);
    const double u = uniform01(g) * cdf.back();
    const size_t i = size_t(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
    return order[std::min(i, size_t(E - 1))];
  };
  const int E_loc = E / P;
  for (int t = 0; t < T; ++t) {
    int32_t* ids = out.ids.data() + size_t(t) * k;
    const bool one_rank = t == 0 && E_loc >= k;  // every run has such a token
    const int first = ((rank + 1) % P) * E_loc;
    for (int j = 0; j < k; ++j) {
      int e;
      do {
        e = one_rank ? first + below(g, E_loc) : draw();
      } while (std::find(ids, ids + j, e) != ids + j);
      ids[j] = e;
    }
    // Weights: a softmax of Gaussian logits over the k picks.
    float* w = out.weights.data() + size_t(t) * k;
    std::vector<double> logit(k);
    double mx = -1e300, sum = 0;
    for (double& l : logit) mx = std::max(mx, l = gaussian(g));
    for (double& l : logit) sum += (l = std::exp(l - mx));
    for (int j = 0; j < k; ++j) w[j] = float(logit[j] / sum);
  }
  return out;
}

void validate_moe_routes(const MoeRoutes& r, int E, const std::string& where) {
  for (int t = 0; t < r.T; ++t)
    for (int j = 0; j < r.k; ++j) {
      const int32_t e = r.ids[size_t(t) * r.k + j];
      if (e < 0 || e >= E)
        throw Error(fmt::format("{}: token {} slot {}: expert {}; expected an expert id from 0 to {}", where, t, j, e, E - 1));
      for (int i = 0; i < j; ++i)
        if (r.ids[size_t(t) * r.k + i] == e)
          throw Error(fmt::format("{}: token {}: expert {} in slots {} and {}: expected k distinct experts", where, t,
                                  e, i, j));
      const float w = r.weights[size_t(t) * r.k + j];
      if (!std::isfinite(w)) throw Error(fmt::format("{}: token {} slot {}: weight {} is not finite; expected a finite weight", where, t, j, w));
    }
}

MoeTraffic moe_traffic(const std::vector<MoeRoutes>& routes, int E, int P, int hidden, Backend b, Placement p) {
  MoeTraffic tr;
  const int E_loc = E / P;
  tr.pairs.assign(P, std::vector<int64_t>(P, 0));
  for (int s = 0; s < P && s < int(routes.size()); ++s)
    for (int32_t e : routes[s].ids) ++tr.pairs[s][e / E_loc];
  tr.rows_per_rank.assign(P, 0);
  int64_t all = 0, cross_max = 0, owned_max = 0;
  for (int r = 0; r < P; ++r) {
    int64_t cross = 0;
    for (int s = 0; s < P; ++s) {
      tr.rows_per_rank[r] += tr.pairs[s][r];
      if (s != r) cross += tr.pairs[s][r];
    }
    all += tr.rows_per_rank[r];
    cross_max = std::max(cross_max, cross);
    owned_max = std::max(owned_max, tr.rows_per_rank[r]);
  }
  tr.rows_max_rank = owned_max;
  const double row = 2.0 * hidden;
  // Under the pull dispatch a rank reads the rows of its experts from the
  // sources and stores the same rows, computed, back to them.
  tr.bytes_dispatch = tr.bytes_combine = double(cross_max) * row;
  if (b == Backend::emulated)
    tr.bytes_floor = 2.0 * double(all) * row;
  else
    tr.bytes_floor = 2.0 * double(p == Placement::host ? owned_max : cross_max) * row;
  return tr;
}

std::vector<int> moe_check_tokens(const MoeRoutes& r, int E_per_rank, int n, uint64_t seed) {
  std::set<int> pick;
  if (r.T == 0 || n <= 0) return {};
  pick.insert(r.T - 1);
  pick.insert(0);
  for (int t = 0; t < r.T; ++t) {
    const int32_t* ids = r.ids.data() + size_t(t) * r.k;
    bool one = true;
    for (int j = 1; j < r.k; ++j) one = one && ids[j] / E_per_rank == ids[0] / E_per_rank;
    if (one) {
      pick.insert(t);
      break;
    }
  }
  std::mt19937_64 g(seed * 31 + 7);
  while (int(pick.size()) < std::min(n, r.T)) pick.insert(below(g, r.T));
  return {pick.begin(), pick.end()};
}

}  // namespace xstage
