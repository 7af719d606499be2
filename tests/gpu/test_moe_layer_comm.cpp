// The MoE layer's communication kernels alone (src/device/moe/: route, pull,
// combine, permute) on emulated ranks, device and host buffers, against a CPU
// model of the data flow (docs/design/moe-layer.md): counts, flags, send
// offsets, every pool row's bytes, weight, destination and send-order index,
// offsets; then an "expert" computed on the host (each row scaled), placed
// where the fused kernel's L2 would store it, summed by the combine in slot
// order, bit for bit; the unfused path (permute, the chunks copied as the
// runtime copies them, the unfused combine) gives the same bits. Routing:
// uniform, a token's experts all on one rank, experts with no tokens, ranks
// with no tokens, T not a multiple of anything. Waits time out into their
// records; bad ids are recorded.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "device/moe/layer_comm_launch.hpp"
#include "gpu/need_gpus.hpp"
#include "xstage/attention/attention.hpp"  // float_to_bf16, bf16_to_float
#include "xstage/comm/world.hpp"

using namespace xstage;

namespace {

#define CK(x) ASSERT_EQ((x), cudaSuccess)

enum class Routing { uniform, one_rank, sparse_experts };

struct Case {
  int P, E, k, H, T_max;
  std::vector<int> T;  // per rank
  Routing routing;
  Placement placement;
};

std::string describe(const Case& c) {
  std::string t;
  for (int x : c.T) t += std::to_string(x) + " ";
  return "P " + std::to_string(c.P) + " E " + std::to_string(c.E) + " k " + std::to_string(c.k) + " H " +
         std::to_string(c.H) + " T_max " + std::to_string(c.T_max) + " T [ " + t + "] routing " +
         std::to_string(int(c.routing)) + " " + to_string(c.placement);
}

// The inputs of every rank and what the data flow makes of them.
struct Model {
  int P, E, E_loc, k, H, T_max;
  std::vector<int> T;
  std::vector<std::vector<int32_t>> ids;    // [s][t * k + j]
  std::vector<std::vector<float>> weights;  // [s][t * k + j]
  std::vector<std::vector<uint16_t>> x;     // [s][t * H + c]
  // counts[r][s][e_loc] and the pairs in token order: routed[r][s][e_loc] = {t * k + j}
  std::vector<std::vector<std::vector<std::vector<int32_t>>>> routed;

  Model(const Case& c, uint64_t seed) : P(c.P), E(c.E), E_loc(c.E / c.P), k(c.k), H(c.H), T_max(c.T_max), T(c.T) {
    std::mt19937_64 rng(seed);
    ids.resize(P), weights.resize(P), x.resize(P);
    routed.assign(P, std::vector<std::vector<std::vector<int32_t>>>(P, std::vector<std::vector<int32_t>>(E_loc)));
    for (int s = 0; s < P; ++s) {
      ids[s].assign(size_t(T_max) * k, 0), weights[s].assign(size_t(T_max) * k, 0.f);
      x[s].resize(size_t(T_max) * H);
      for (auto& v : x[s]) v = float_to_bf16(std::uniform_real_distribution<float>(-2.f, 2.f)(rng));
      for (int t = 0; t < T[s]; ++t) {
        std::vector<int> pool;  // the experts this token may pick
        if (c.routing == Routing::uniform) {
          pool.resize(E);
          std::iota(pool.begin(), pool.end(), 0);
        } else if (c.routing == Routing::one_rank) {
          const int r = int(rng() % P);
          for (int e = 0; e < E_loc; ++e) pool.push_back(r * E_loc + e);
        } else {  // every third expert only: the others get nothing
          for (int e = 0; e < E; e += 3) pool.push_back(e);
        }
        std::shuffle(pool.begin(), pool.end(), rng);
        for (int j = 0; j < k; ++j) {
          ids[s][size_t(t) * k + j] = pool.at(size_t(j));
          weights[s][size_t(t) * k + j] = std::uniform_real_distribution<float>(0.05f, 1.f)(rng);
        }
      }
      for (int t = 0; t < T[s]; ++t)
        for (int j = 0; j < k; ++j) {
          const int e = ids[s][size_t(t) * k + j];
          routed[e / E_loc][s][e % E_loc].push_back(t * k + j);
        }
    }
  }
  int count(int r, int s, int e_loc) const { return int(routed[r][s][e_loc].size()); }
  // The pool of the launch: (r, e_loc, s, i), packed over the receivers.
  struct Row {
    int r, e_loc, s, i, pair;
  };
  std::vector<Row> pool() const {
    std::vector<Row> rows;
    for (int r = 0; r < P; ++r)
      for (int e = 0; e < E_loc; ++e)
        for (int s = 0; s < P; ++s)
          for (int i = 0; i < count(r, s, e); ++i) rows.push_back({r, e, s, i, routed[r][s][e][size_t(i)]});
    return rows;
  }
  // Send order of the launch: (r, s, e_loc, i).
  int send_index(const Row& w) const {
    int n = 0;
    for (int r = 0; r < P; ++r)
      for (int s = 0; s < P; ++s)
        for (int e = 0; e < E_loc; ++e)
          for (int i = 0; i < count(r, s, e); ++i) {
            if (r == w.r && s == w.s && e == w.e_loc && i == w.i) return n;
            ++n;
          }
    return -1;
  }
  // The host "expert": row g's output = bf16(x * weight * (1 + e_loc / 8)).
  std::vector<uint16_t> expert_row(const Row& w) const {
    const int t = w.pair / k, j = w.pair % k;
    const float scale = weights[w.s][size_t(t) * k + j] * (1.f + float(w.e_loc) / 8.f);
    std::vector<uint16_t> y(static_cast<size_t>(H));
    for (int c = 0; c < H; ++c) y[size_t(c)] = float_to_bf16(bf16_to_float(x[w.s][size_t(t) * H + c]) * scale);
    return y;
  }
};

template <class T>
std::vector<T> download(const void* p, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDefault), cudaSuccess);
  return h;
}

template <class T>
void upload(void* p, const std::vector<T>& h) {
  ASSERT_EQ(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyDefault), cudaSuccess);
}

// Buffers as MoeLayer makes them for one emulated launch (n = P).
struct Buffers {
  std::unique_ptr<World> w;
  const SymmetricBuffer *x_send, *routes, *counts, *combine, *flags;
  int64_t rows_cap;
  uint16_t *pool_x, *pool_out, *out;
  float *row_weight, *topk_weights;
  int32_t *row_dest_rank, *row_dest_slot, *row_perm, *offs, *topk_ids, *pos, *send_base, *tokens, *route_done;
  int32_t* plan;                       // the pull's plan
  remote::FlagTimeoutRecord* records;  // [2]: pull, combine
  moe::RouteInputError* input_error;

  explicit Buffers(const Case& c) {
    const int P = c.P, E_loc = c.E / c.P;
    w = World::create({Backend::emulated, P, c.placement, 0});
    rows_cap = int64_t(P) * c.T_max * std::min(c.k, E_loc);
    x_send = &w->alloc_symmetric(size_t(c.T_max) * c.H * 2);
    routes = &w->alloc_symmetric(size_t(P) * E_loc * c.T_max * 8);
    counts = &w->alloc_symmetric(size_t(P) * E_loc * 4);
    combine = &w->alloc_symmetric(size_t(c.k) * c.T_max * c.H * 2);
    flags = &w->alloc_flags(size_t(moe::layer_flag_count(P)));
    const size_t rows = size_t(P) * rows_cap, pairs = size_t(P) * c.T_max * c.k;
    auto local = [&](size_t bytes) { return w->alloc_local(0, bytes); };
    pool_x = static_cast<uint16_t*>(local(rows * c.H * 2));
    pool_out = static_cast<uint16_t*>(local(rows * c.H * 2));
    out = static_cast<uint16_t*>(local(size_t(P) * c.T_max * c.H * 2));
    row_weight = static_cast<float*>(local(rows * 4));
    row_dest_rank = static_cast<int32_t*>(local(rows * 4));
    row_dest_slot = static_cast<int32_t*>(local(rows * 4));
    row_perm = static_cast<int32_t*>(local(rows * 4));
    offs = static_cast<int32_t*>(local(size_t(P) * E_loc * 4));
    topk_ids = static_cast<int32_t*>(local(pairs * 4));
    topk_weights = static_cast<float*>(local(pairs * 4));
    pos = static_cast<int32_t*>(local(pairs * 4));
    send_base = static_cast<int32_t*>(local(size_t(P) * (c.E + 1) * 4));
    tokens = static_cast<int32_t*>(local(size_t(P) * 4));
    route_done = static_cast<int32_t*>(local(size_t(P) * 4));
    plan = static_cast<int32_t*>(local(2 * (size_t(P) * E_loc * P + 1) * 4));
    records = static_cast<remote::FlagTimeoutRecord*>(local(2 * sizeof(remote::FlagTimeoutRecord)));
    input_error = static_cast<moe::RouteInputError*>(local(sizeof(moe::RouteInputError)));
    EXPECT_EQ(cudaMemset(route_done, 0, size_t(P) * 4), cudaSuccess);
    EXPECT_EQ(cudaMemset(records, 0, 2 * sizeof(remote::FlagTimeoutRecord)), cudaSuccess);
    EXPECT_EQ(cudaMemset(input_error, 0, sizeof(moe::RouteInputError)), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  uint64_t* const* flag_table() const { return reinterpret_cast<uint64_t* const*>(flags->device_table(0)); }

  moe::RouteParams route(const Case& c, uint64_t epoch) const {
    moe::RouteParams p;
    p.topk_ids = topk_ids, p.topk_weights = topk_weights, p.tokens = tokens;
    p.routes = routes->device_table(0), p.counts = counts->device_table(0), p.flags = flag_table();
    p.pos = pos, p.send_base = send_base, p.done_ctas = route_done, p.input_error = input_error;
    p.rank0 = 0, p.n = c.P, p.P = c.P, p.E = c.E, p.E_loc = c.E / c.P, p.k = c.k, p.T_max = c.T_max;
    p.epoch = epoch;
    return p;
  }
  moe::PullParams pull(const Case& c, uint64_t epoch, uint64_t timeout_ns) const {
    moe::PullParams p;
    p.x_send = x_send->device_table(0), p.routes = routes->device_table(0), p.counts = counts->device_table(0);
    p.plan = plan;
    p.pool_x = pool_x, p.row_weight = row_weight, p.row_dest_rank = row_dest_rank, p.row_dest_slot = row_dest_slot;
    p.row_perm = row_perm, p.offs = offs;
    p.rank0 = 0, p.n = c.P, p.P = c.P, p.E_loc = c.E / c.P, p.k = c.k, p.T_max = c.T_max, p.H = c.H;
    p.rows_cap = rows_cap, p.epoch = epoch, p.timeout_ns = timeout_ns, p.timeout_record = records;
    return p;
  }
  moe::CombineParams combine_params(const Case& c, uint64_t epoch, uint64_t timeout_ns, bool fused) const {
    moe::CombineParams p;
    p.combine = combine->device_table(0), p.out = out, p.tokens = tokens;
    p.topk_ids = topk_ids, p.pos = pos;
    if (!fused) p.send_base = send_base;
    p.rank0 = 0, p.n = c.P, p.P = c.P, p.E = c.E, p.k = c.k, p.T_max = c.T_max, p.H = c.H;
    p.epoch = epoch, p.timeout_ns = timeout_ns, p.timeout_record = records + 1;
    return p;
  }
  // The timed wait before the pull (the counts flags) or the fused combine
  // (the done flags), as the layer launches it; with skip_after_failed_pull
  // the combine's wait gives up at once when the pull's has.
  int wait(const Case& c, bool counts_flags, uint64_t epoch, uint64_t timeout_ns,
           bool skip_after_failed_pull = false) const {
    moe::WaitFlagsParams p;
    p.flags = flag_table(), p.rank0 = 0, p.n = c.P, p.P = c.P;
    p.first = counts_flags ? moe::layer_flag_counts(0) : moe::layer_flag_done(c.P, 0);
    p.epoch = epoch, p.timeout_ns = timeout_ns, p.timeout_record = counts_flags ? records : records + 1;
    if (skip_after_failed_pull) p.earlier_records = records, p.earlier_count = 1;
    return moe::launch_moe_wait_flags(p, w->lead_stream());
  }
};

constexpr uint64_t kLongWait = 5'000'000'000ull;

void upload_inputs(const Case& c, const Model& m, Buffers& b) {
  std::vector<int32_t> ids;
  std::vector<float> wts;
  for (int s = 0; s < c.P; ++s) {
    ids.insert(ids.end(), m.ids[s].begin(), m.ids[s].end());
    wts.insert(wts.end(), m.weights[s].begin(), m.weights[s].end());
    upload(b.x_send->ptrs[s], m.x[s]);
  }
  upload(b.topk_ids, ids);
  upload(b.topk_weights, wts);
  upload(b.tokens, std::vector<int32_t>(c.T.begin(), c.T.end()));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// Route and pull one epoch; checks everything the dispatch leaves.
void check_dispatch(const Case& c, const Model& m, Buffers& b, uint64_t epoch) {
  const int P = c.P, E_loc = c.E / c.P, k = c.k, H = c.H;
  const cudaStream_t st = b.w->lead_stream();
  ASSERT_EQ(moe::launch_moe_route(b.route(c, epoch), st), 0);
  ASSERT_EQ(b.wait(c, true, epoch, kLongWait), 0);
  ASSERT_EQ(moe::launch_moe_pull(b.pull(c, epoch, kLongWait), 7, st), 0);  // few CTAs: warps take many rows
  CK(cudaStreamSynchronize(st));
  const auto rec = download<remote::FlagTimeoutRecord>(b.records, 2);
  ASSERT_EQ(rec[0].set, 0u) << "the pull timed out on rank " << rec[0].rank << " flag " << rec[0].flag;
  ASSERT_EQ(download<moe::RouteInputError>(b.input_error, 1)[0].set, 0u);
  ASSERT_EQ(download<int32_t>(b.route_done, size_t(P)), std::vector<int32_t>(size_t(P), 0)) << "route counter reset";

  for (int r = 0; r < P; ++r) {
    const auto counts = download<int32_t>(b.counts->ptrs[r], size_t(P) * E_loc);
    const auto flags = download<uint64_t>(b.flags->ptrs[r], size_t(2 * P));
    const auto routes = download<int32_t>(b.routes->ptrs[r], size_t(P) * E_loc * c.T_max * 2);
    for (int s = 0; s < P; ++s) {
      EXPECT_EQ(flags[size_t(moe::layer_flag_counts(s))], epoch) << "rank " << r << " source " << s;
      for (int e = 0; e < E_loc; ++e) {
        ASSERT_EQ(counts[size_t(s) * E_loc + e], m.count(r, s, e)) << "rank " << r << " source " << s << " e " << e;
        for (int i = 0; i < m.count(r, s, e); ++i) {
          const size_t at = (size_t(s) * E_loc + e) * c.T_max + i;
          const int pair = m.routed[r][s][e][size_t(i)];
          ASSERT_EQ(routes[at], pair) << "routes of rank " << r << " from " << s << " expert " << e << " i " << i;
          float w;
          std::memcpy(&w, &routes[size_t(P) * E_loc * c.T_max + at], 4);
          ASSERT_EQ(w, m.weights[s][size_t(pair)]);
        }
      }
    }
  }
  const auto send_base = download<int32_t>(b.send_base, size_t(P) * (c.E + 1));
  const auto pos = download<int32_t>(b.pos, size_t(P) * c.T_max * k);
  for (int s = 0; s < P; ++s) {
    int run = 0;
    for (int e = 0; e <= c.E; ++e) {
      ASSERT_EQ(send_base[size_t(s) * (c.E + 1) + e], run) << "send_base of source " << s << " at expert " << e;
      if (e < c.E) run += m.count(e / E_loc, s, e % E_loc);
    }
    for (int t = 0; t < c.T[s]; ++t)
      for (int j = 0; j < k; ++j) {
        const int e = m.ids[s][size_t(t) * k + j];
        const auto& list = m.routed[e / E_loc][s][e % E_loc];
        const int want = int(std::find(list.begin(), list.end(), t * k + j) - list.begin());
        ASSERT_EQ(pos[(size_t(s) * c.T_max + t) * k + j], want) << "pos of source " << s << " token " << t;
      }
  }
  const auto rows = m.pool();
  const auto offs = download<int32_t>(b.offs, size_t(P) * E_loc);
  int end = 0;
  for (int r = 0; r < P; ++r)
    for (int e = 0; e < E_loc; ++e) {
      for (int s = 0; s < P; ++s) end += m.count(r, s, e);
      ASSERT_EQ(offs[size_t(r) * E_loc + e], end) << "offs of rank " << r << " expert " << e;
    }
  ASSERT_EQ(end, int(rows.size()));
  const auto pool = download<uint16_t>(b.pool_x, rows.size() * H);
  const auto rw = download<float>(b.row_weight, rows.size());
  const auto rank = download<int32_t>(b.row_dest_rank, rows.size());
  const auto slot = download<int32_t>(b.row_dest_slot, rows.size());
  const auto perm = download<int32_t>(b.row_perm, rows.size());
  for (size_t g = 0; g < rows.size(); ++g) {
    const auto& w = rows[g];
    const int t = w.pair / k, j = w.pair % k;
    ASSERT_EQ(0, std::memcmp(&pool[g * H], &m.x[w.s][size_t(t) * H], size_t(H) * 2)) << "pool row " << g;
    ASSERT_EQ(rw[g], m.weights[w.s][size_t(w.pair)]) << "row " << g;
    ASSERT_EQ(rank[g], w.s) << "row " << g;
    ASSERT_EQ(slot[g], j * c.T_max + t) << "row " << g;
    ASSERT_EQ(perm[g], m.send_index(w)) << "row " << g;
  }
}

// out[s][t] = bf16(sum_j float(y of (t, j))), fp32 from 0 in slot order.
std::vector<uint16_t> expected_output(const Case& c, const Model& m, int s) {
  std::vector<std::vector<uint16_t>> y(size_t(c.T_max) * c.k);
  for (const auto& w : m.pool())
    if (w.s == s) y[size_t(w.pair)] = m.expert_row(w);
  std::vector<uint16_t> out(size_t(c.T[s]) * c.H);
  for (int t = 0; t < c.T[s]; ++t)
    for (int col = 0; col < c.H; ++col) {
      float acc = 0.f;
      for (int j = 0; j < c.k; ++j) acc += bf16_to_float(y[size_t(t) * c.k + j][size_t(col)]);
      out[size_t(t) * c.H + col] = float_to_bf16(acc);
    }
  return out;
}

void check_output(const Case& c, const Model& m, Buffers& b, const char* path) {
  const auto out = download<uint16_t>(b.out, size_t(c.P) * c.T_max * c.H);
  for (int s = 0; s < c.P; ++s) {
    const auto want = expected_output(c, m, s);
    const uint16_t* got = &out[size_t(s) * c.T_max * c.H];
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(got[i], want[i]) << path << ": rank " << s << " token " << i / c.H << " column " << i % c.H;
    for (size_t i = want.size(); i < size_t(c.T_max) * c.H; ++i)
      ASSERT_EQ(got[i], 0xFFFF) << path << ": rank " << s << " row " << i / c.H << " past T = " << c.T[s];
  }
}

void poison(void* p, size_t bytes) {
  ASSERT_EQ(cudaMemset(p, 0xFF, bytes), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

void poison_combine_and_out(const Case& c, Buffers& b) {
  for (int s = 0; s < c.P; ++s) {
    upload(b.combine->ptrs[s], std::vector<uint16_t>(size_t(c.k) * c.T_max * c.H, 0xFFFF));
  }
  poison(b.out, size_t(c.P) * c.T_max * c.H * 2);
}

// The fused path's combine: the host stands in for L2's remote stores and the
// done flags; the combine must wait for them and sum in slot order.
void check_fused_combine(const Case& c, const Model& m, Buffers& b, uint64_t epoch) {
  poison_combine_and_out(c, b);
  for (const auto& w : m.pool()) {
    const int t = w.pair / c.k, j = w.pair % c.k;
    const auto y = m.expert_row(w);
    CK(cudaMemcpy(static_cast<uint16_t*>(b.combine->ptrs[w.s]) + (size_t(j) * c.T_max + t) * c.H, y.data(),
                  size_t(c.H) * 2, cudaMemcpyDefault));
  }
  for (int s = 0; s < c.P; ++s)
    for (int r = 0; r < c.P; ++r)
      CK(cudaMemcpy(b.flags->flag(s, size_t(moe::layer_flag_done(c.P, r))), &epoch, 8, cudaMemcpyDefault));
  CK(cudaDeviceSynchronize());
  ASSERT_EQ(b.wait(c, false, epoch, kLongWait), 0);
  ASSERT_EQ(moe::launch_moe_combine(b.combine_params(c, epoch, kLongWait, true), b.w->lead_stream()), 0);
  CK(cudaStreamSynchronize(b.w->lead_stream()));
  ASSERT_EQ(download<remote::FlagTimeoutRecord>(b.records + 1, 1)[0].set, 0u) << "the combine timed out";
  check_output(c, m, b, "fused combine");
}

// The unfused path: L2's output in pool order, permuted into send order, the
// chunks copied to the sources' flat combine areas as the runtime copies
// them (receiver r's rows from s at send_base[s][r * E_loc]), summed via pos.
void check_unfused_combine(const Case& c, const Model& m, Buffers& b) {
  const int P = c.P, E_loc = c.E / c.P, H = c.H;
  poison_combine_and_out(c, b);
  const auto rows = m.pool();
  std::vector<uint16_t> y(rows.size() * H);
  for (size_t g = 0; g < rows.size(); ++g) {
    const auto row = m.expert_row(rows[g]);
    std::copy(row.begin(), row.end(), y.begin() + g * H);
  }
  upload(b.pool_out, y);
  poison(b.pool_x, size_t(P) * b.rows_cap * H * 2);
  moe::PermuteParams pp;
  pp.src = b.pool_out, pp.dst = b.pool_x, pp.row_perm = b.row_perm, pp.offs = b.offs;
  pp.E_run = P * E_loc, pp.H = H, pp.rows = P * b.rows_cap;
  ASSERT_EQ(moe::launch_moe_permute(pp, 3, b.w->lead_stream()), 0);
  CK(cudaStreamSynchronize(b.w->lead_stream()));
  const auto send_base = download<int32_t>(b.send_base, size_t(P) * (c.E + 1));
  int64_t at = 0;  // send order of the launch: (r, s, e_loc, i)
  for (int r = 0; r < P; ++r)
    for (int s = 0; s < P; ++s) {
      int64_t n = 0;
      for (int e = 0; e < E_loc; ++e) n += m.count(r, s, e);
      const int64_t dst = send_base[size_t(s) * (c.E + 1) + size_t(r) * E_loc];
      if (n > 0)
        CK(cudaMemcpy(static_cast<uint16_t*>(b.combine->ptrs[s]) + dst * H, b.pool_x + at * H, size_t(n) * H * 2,
                      cudaMemcpyDefault));
      at += n;
    }
  CK(cudaDeviceSynchronize());
  ASSERT_EQ(moe::launch_moe_combine(b.combine_params(c, 0, kLongWait, false), b.w->lead_stream()), 0);
  CK(cudaStreamSynchronize(b.w->lead_stream()));
  check_output(c, m, b, "unfused combine");
}

class MoeLayerComm : public testing::TestWithParam<Case> {};

TEST_P(MoeLayerComm, DispatchAndCombineFollowTheDataFlow) {
  XSTAGE_NEED_GPUS(1);
  const Case c = GetParam();
  SCOPED_TRACE(describe(c));
  Buffers b(c);
  // Two runs with different routing: the second checks that the first left
  // the route counters at zero and that flags compare against the new epoch.
  for (uint64_t epoch = 1; epoch <= 2; ++epoch) {
    SCOPED_TRACE("epoch " + std::to_string(epoch));
    const Model m(c, 100 * epoch + uint64_t(c.P));
    ASSERT_NO_FATAL_FAILURE(upload_inputs(c, m, b));
    poison(b.pool_x, size_t(c.P) * b.rows_cap * c.H * 2);
    ASSERT_NO_FATAL_FAILURE(check_dispatch(c, m, b, epoch));
    ASSERT_NO_FATAL_FAILURE(check_fused_combine(c, m, b, epoch));
    ASSERT_NO_FATAL_FAILURE(check_unfused_combine(c, m, b));
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (Placement pl : {Placement::device, Placement::host}) {
    out.push_back({1, 4, 2, 256, 37, {37}, Routing::uniform, pl});
    out.push_back({2, 8, 3, 136, 37, {37, 20}, Routing::uniform, pl});          // 17 vectors a row
    out.push_back({3, 12, 4, 1032, 300, {300, 0, 299}, Routing::uniform, pl});  // a rank with no tokens; 2 route chunks
    out.push_back({4, 8, 2, 256, 45, {45, 1, 44, 13}, Routing::one_rank, pl});  // k experts on one rank
    out.push_back({2, 12, 3, 264, 70, {70, 65}, Routing::sparse_experts, pl});  // two thirds of the experts empty
  }
  out.push_back({2, 16, 8, 256, 700, {700, 513}, Routing::uniform, Placement::device});  // k = E_loc
  return out;
}

std::string case_name(const testing::TestParamInfo<Case>& i) {
  const Case& c = i.param;
  const char* routing[] = {"uniform", "one_rank", "sparse_experts"};
  return "P" + std::to_string(c.P) + "_E" + std::to_string(c.E) + "_k" + std::to_string(c.k) + "_H" +
         std::to_string(c.H) + "_T" + std::to_string(c.T_max) + "_" + routing[int(c.routing)] + "_" +
         to_string(c.placement);
}

INSTANTIATE_TEST_SUITE_P(Cases, MoeLayerComm, testing::ValuesIn(cases()), case_name);

// A pull whose counts never come, a combine whose rows never come: each
// waits its timeout, records rank, flag and values, and ends.
TEST(MoeLayerCommWaits, TimeoutsRecordRankFlagAndValues) {
  XSTAGE_NEED_GPUS(1);
  const Case c{2, 4, 2, 256, 16, {16, 16}, Routing::uniform, Placement::device};
  Buffers b(c);
  const Model m(c, 1);
  ASSERT_NO_FATAL_FAILURE(upload_inputs(c, m, b));
  poison(b.pool_x, size_t(c.P) * b.rows_cap * c.H * 2);
  poison(b.offs, size_t(c.P) * (c.E / c.P) * 4);
  poison(b.out, size_t(c.P) * c.T_max * c.H * 2);
  ASSERT_EQ(moe::launch_moe_route(b.route(c, 1), b.w->lead_stream()), 0);
  ASSERT_EQ(b.wait(c, true, 2, 1'000'000), 0);  // epoch 2: never published
  ASSERT_EQ(moe::launch_moe_pull(b.pull(c, 2, 1'000'000), 4, b.w->lead_stream()), 0);
  ASSERT_EQ(b.wait(c, false, 3, 1'000'000), 0);
  ASSERT_EQ(moe::launch_moe_combine(b.combine_params(c, 3, 1'000'000, true), b.w->lead_stream()), 0);
  CK(cudaStreamSynchronize(b.w->lead_stream()));
  // After a failed wait the kernels behind it write nothing.
  for (const auto& [ptr, bytes, what] :
       {std::tuple{static_cast<const void*>(b.pool_x), size_t(c.P) * b.rows_cap * c.H * 2, "pool rows"},
        std::tuple{static_cast<const void*>(b.offs), size_t(c.P) * (c.E / c.P) * 4, "expert offsets"},
        std::tuple{static_cast<const void*>(b.out), size_t(c.P) * c.T_max * c.H * 2, "combine output"}}) {
    const auto got = download<uint8_t>(ptr, bytes);
    EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](uint8_t v) { return v == 0xFF; })) << what;
  }
  const auto rec = download<remote::FlagTimeoutRecord>(b.records, 2);
  ASSERT_EQ(rec[0].set, 1u);
  EXPECT_GE(rec[0].rank, 0);
  EXPECT_LT(rec[0].rank, 2);
  EXPECT_LT(rec[0].flag, moe::layer_flag_counts(2));  // a counts flag
  EXPECT_EQ(rec[0].expected, 2u);
  EXPECT_EQ(rec[0].seen, 1u);
  EXPECT_GE(rec[0].waited_ns, 1'000'000u);
  ASSERT_EQ(rec[1].set, 1u);
  EXPECT_GE(rec[1].flag, moe::layer_flag_done(2, 0));
  EXPECT_LT(rec[1].flag, moe::layer_flag_done(2, 2));
  EXPECT_EQ(rec[1].expected, 3u);
  EXPECT_EQ(rec[1].seen, 0u);
}

// After the pull's wait failed, this rank's expert kernel runs nothing, so
// its own done flag never comes: the combine's wait must not wait for it
// (it leaves its record clear, the pull's names the cause) and the combine
// must not sum the rows of an earlier run.
TEST(MoeLayerCommWaits, AfterAFailedPullTheCombineStopsAtOnce) {
  XSTAGE_NEED_GPUS(1);
  const Case c{2, 4, 2, 256, 16, {16, 16}, Routing::uniform, Placement::device};
  Buffers b(c);
  const Model m(c, 1);
  ASSERT_NO_FATAL_FAILURE(upload_inputs(c, m, b));
  poison(b.out, size_t(c.P) * c.T_max * c.H * 2);
  const cudaStream_t st = b.w->lead_stream();
  ASSERT_EQ(moe::launch_moe_route(b.route(c, 1), st), 0);
  ASSERT_EQ(b.wait(c, true, 2, 1'000'000), 0);  // epoch 2: never published
  CK(cudaStreamSynchronize(st));
  ASSERT_EQ(download<remote::FlagTimeoutRecord>(b.records, 1)[0].set, 1u);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(b.wait(c, false, 2, kLongWait, true), 0);
  auto p = b.combine_params(c, 2, kLongWait, true);
  p.earlier_records = b.records, p.earlier_count = 1;
  ASSERT_EQ(moe::launch_moe_combine(p, st), 0);
  CK(cudaStreamSynchronize(st));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 1.0) << "the combine's wait waited for a flag the failed run never sets";
  EXPECT_EQ(download<remote::FlagTimeoutRecord>(b.records + 1, 1)[0].set, 0u) << "the combine's record names no cause";
  const auto got = download<uint8_t>(b.out, size_t(c.P) * c.T_max * c.H * 2);
  EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](uint8_t v) { return v == 0xFF; })) << "combine output written";
}

// Out-of-range and repeated ids are recorded (rank, token, slot, id) and left out.
TEST(MoeLayerCommInput, BadIdsAreRecorded) {
  XSTAGE_NEED_GPUS(1);
  // k = 2: the ids read one by one; k = 4: 16 bytes at a time.
  for (const Case& c : {Case{2, 4, 2, 256, 8, {8, 8}, Routing::uniform, Placement::device},
                        Case{2, 8, 4, 256, 8, {8, 8}, Routing::uniform, Placement::device}})
    for (int kind : {moe::kRouteIdOutOfRange, moe::kRouteIdRepeated}) {
      SCOPED_TRACE(describe(c) + " kind " + std::to_string(kind));
      Buffers b(c);
      Model m(c, 3);
      const int bad_slot = 1, bad_token = 5;
      int& id = m.ids[1][size_t(bad_token) * c.k + bad_slot];
      id = kind == moe::kRouteIdOutOfRange ? c.E + 3 : m.ids[1][size_t(bad_token) * c.k];
      ASSERT_NO_FATAL_FAILURE(upload_inputs(c, m, b));
      ASSERT_EQ(moe::launch_moe_route(b.route(c, 1), b.w->lead_stream()), 0);
      CK(cudaStreamSynchronize(b.w->lead_stream()));
      const auto e = download<moe::RouteInputError>(b.input_error, 1)[0];
      ASSERT_EQ(e.set, 1u);
      EXPECT_EQ(e.kind, kind);
      EXPECT_EQ(e.rank, 1);
      EXPECT_EQ(e.token, bad_token);
      EXPECT_EQ(e.slot, bad_slot);
      EXPECT_EQ(e.id, id);
    }
}

}  // namespace
