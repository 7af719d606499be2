// xstage moe's measurement (src/harness/moe/moe_layer_bench.hpp).
#include "harness/moe/moe_layer_bench.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "device/fill/fill_random.hpp"
#include "harness/moe/moe_layer_check.hpp"
#include "harness/moe/moe_layer_timing.hpp"
#include "harness/ulysses/ulysses_bench.hpp"  // the floor probe and the paths' profiles
#include "xstage/attention/attention.hpp"  // float_to_bf16, bf16_to_float
#include "xstage/core/error.hpp"
#include "xstage/model/profile.hpp"
#include "xstage/moe/moe_prediction.hpp"

namespace xstage {

namespace {

// Fill streams of the random inputs (fill_random_value's `stream`): the
// weights of global expert e at their global offset, rank s's tokens on a
// stream of their own.
enum : uint64_t { kStreamW13 = 1, kStreamW2 = 2, kStreamX0 = 16 };

constexpr int kDefaultCheckTokens = 6;
constexpr double kCheckTolerance = 1e-2;  // as the grouped GEMMs' check (moe_check.hpp)

int E_of(const MoeLayerBenchOptions& o) { return o.shape.experts; }

bool inputs_given(const MoeLayerBenchOptions& o) {
  return !o.x.empty() || !o.ids.empty() || !o.weights.empty() || !o.w13.empty() || !o.w2.empty();
}

// The given arrays against the shapes P and T make (a peer world learns P from its GPUs).
void check_given_sizes(const MoeLayerBenchOptions& o, int P) {
  if (!inputs_given(o)) return;
  const MoeShape& s = o.shape;
  const size_t T = size_t(o.tokens.front()), H = size_t(s.hidden), I = size_t(s.inter), E = size_t(s.experts),
               k = size_t(s.topk);
  auto need = [](const std::vector<float>& v, size_t n, const char* name, const std::string& shape) {
    if (!v.empty() && v.size() != n)
      throw Error(fmt::format("moe inputs: {}: expected {} elements ({}), got {}", name, n, shape, v.size()));
  };
  need(o.x, size_t(P) * T * H, "x", fmt::format("[P, T, hidden] = [{}, {}, {}]", P, T, H));
  need(o.ids, size_t(P) * T * k, "ids", fmt::format("[P, T, k] = [{}, {}, {}]", P, T, k));
  need(o.weights, size_t(P) * T * k, "weights", fmt::format("[P, T, k] = [{}, {}, {}]", P, T, k));
  need(o.w13, E * 2 * I * H, "w13", fmt::format("[E, 2 inter, hidden] = [{}, {}, {}]", E, 2 * I, H));
  need(o.w2, E * H * I, "w2", fmt::format("[E, hidden, inter] = [{}, {}, {}]", E, H, I));
  if (o.ids.empty() != o.weights.empty())
    throw Error("moe inputs: ids and weights: expected both (the routing) or neither (drawn from --seed)");
}

// Every rank's routing for T tokens: drawn, or the given arrays (ids integral).
std::vector<MoeRoutes> make_routes(const MoeLayerBenchOptions& o, int P, int T) {
  std::vector<MoeRoutes> routes;
  const int E = E_of(o), k = o.shape.topk;
  for (int s = 0; s < P; ++s) {
    if (o.ids.empty()) {
      routes.push_back(moe_make_routes(o.routing, E, k, P, T, o.seed, s));
      continue;
    }
    MoeRoutes r;
    r.T = T, r.k = k;
    const size_t first = size_t(s) * T * k, n = size_t(T) * k;
    for (size_t i = 0; i < n; ++i) {
      const float v = o.ids[first + i];
      if (v != std::floor(v))
        throw Error(fmt::format("--ids: rank {} token {} slot {}: {} is not a whole number; expected an expert id", s,
                                i / k, i % k, v));
      r.ids.push_back(int32_t(v));
    }
    r.weights.assign(o.weights.begin() + first, o.weights.begin() + first + n);
    validate_moe_routes(r, E, fmt::format("--ids/--weights rank {}", s));
    routes.push_back(std::move(r));
  }
  return routes;
}

std::vector<uint16_t> to_bf16(const float* v, size_t n) {
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(v[i]);
  return out;
}

// The inputs on the ranks' GPUs and, for the reference, on the host.
class LayerInputs {
 public:
  LayerInputs(const MoeLayerBenchOptions& o, World& w, MoeLayer& layer) : o_(o), w_(w), layer_(layer) {
    const MoeShape& s = o.shape;
    const int P = w.size(), E_loc = s.experts / P;
    const size_t w13_expert = size_t(2) * s.inter * s.hidden, w2_expert = size_t(s.hidden) * s.inter;
    if (!o.w13.empty()) {
      std::vector<uint16_t> usual = to_bf16(o.w13.data(), o.w13.size());
      w13_host_.resize(usual.size());
      moe_interleave_w13(usual.data(), w13_host_.data(), s.experts, s.inter, s.hidden);
    }
    if (!o.w2.empty()) w2_host_ = to_bf16(o.w2.data(), o.w2.size());
    for (int r : w.local_ranks()) {
      XSTAGE_CUDA(cudaSetDevice(w.device_of(r)));
      const size_t first13 = size_t(r) * E_loc * w13_expert, first2 = size_t(r) * E_loc * w2_expert;
      if (w13_host_.empty())
        XSTAGE_CUDA(fill::launch_fill_random_bf16(layer.w13(r), E_loc * w13_expert, o.seed, kStreamW13, first13,
                                                  nullptr));
      else
        XSTAGE_CUDA(cudaMemcpy(layer.w13(r), w13_host_.data() + first13, E_loc * w13_expert * 2,
                               cudaMemcpyHostToDevice));
      if (w2_host_.empty())
        XSTAGE_CUDA(fill::launch_fill_random_bf16(layer.w2(r), E_loc * w2_expert, o.seed, kStreamW2, first2, nullptr));
      else
        XSTAGE_CUDA(cudaMemcpy(layer.w2(r), w2_host_.data() + first2, E_loc * w2_expert * 2, cudaMemcpyHostToDevice));
      XSTAGE_CUDA(cudaDeviceSynchronize());
    }
  }

  // Tokens, ids and weights of T tokens a rank onto the local ranks.
  void set_tokens(int T, const std::vector<MoeRoutes>& routes) {
    T_ = T;
    const size_t H = size_t(o_.shape.hidden), n = size_t(T) * H;
    for (int r : w_.local_ranks()) {
      XSTAGE_CUDA(cudaSetDevice(w_.device_of(r)));
      if (o_.x.empty()) {
        XSTAGE_CUDA(fill::launch_fill_random_bf16(layer_.x(r), n, o_.seed, kStreamX0 + uint64_t(r), 0, nullptr));
      } else {
        const std::vector<uint16_t> x = to_bf16(o_.x.data() + size_t(r) * n, n);
        XSTAGE_CUDA(cudaMemcpy(layer_.x(r), x.data(), n * 2, cudaMemcpyHostToDevice));
      }
      const MoeRoutes& rt = routes.at(r);
      XSTAGE_CUDA(cudaMemcpy(layer_.topk_ids(r), rt.ids.data(), rt.ids.size() * 4, cudaMemcpyHostToDevice));
      XSTAGE_CUDA(cudaMemcpy(layer_.topk_weights(r), rt.weights.data(), rt.weights.size() * 4, cudaMemcpyHostToDevice));
      XSTAGE_CUDA(cudaDeviceSynchronize());
      layer_.set_tokens(r, T);
    }
  }

  MoeLayerHostInputs host() const {
    MoeLayerHostInputs h;
    const MoeShape& s = o_.shape;
    h.hidden = s.hidden, h.inter = s.inter;
    const size_t H = size_t(s.hidden), w13_expert = size_t(2) * s.inter * H, w2_expert = H * s.inter;
    h.x_row = [this, H](int rank, int token, float* out) {
      const size_t first = size_t(token) * H;
      if (o_.x.empty()) {
        for (size_t c = 0; c < H; ++c) out[c] = fill::fill_random_value(o_.seed, kStreamX0 + uint64_t(rank), first + c);
      } else {
        const float* x = o_.x.data() + (size_t(rank) * T_ * H + first);
        for (size_t c = 0; c < H; ++c) out[c] = bf16_to_float(float_to_bf16(x[c]));
      }
    };
    h.w13 = [this, w13_expert](int e, float* out) { read(w13_host_, kStreamW13, size_t(e) * w13_expert, w13_expert, out); };
    h.w2 = [this, w2_expert](int e, float* out) { read(w2_host_, kStreamW2, size_t(e) * w2_expert, w2_expert, out); };
    return h;
  }

 private:
  void read(const std::vector<uint16_t>& given, uint64_t stream, size_t first, size_t n, float* out) const {
    for (size_t i = 0; i < n; ++i)
      out[i] = given.empty() ? fill::fill_random_value(o_.seed, stream, first + i) : bf16_to_float(given[first + i]);
  }
  const MoeLayerBenchOptions& o_;
  World& w_;
  MoeLayer& layer_;
  std::vector<uint16_t> w13_host_, w2_host_;  // bf16, W13 interleaved; empty: drawn
  int T_ = 0;
};

using Body = std::pair<MoeLayerVariant, MoeSchedulePlan>;

std::vector<std::vector<uint16_t>> read_outputs(World& w, MoeLayer& layer, int T, int H) {
  std::vector<std::vector<uint16_t>> out;
  for (int r : w.local_ranks()) {
    XSTAGE_CUDA(cudaSetDevice(w.device_of(r)));
    out.emplace_back(size_t(T) * H);
    XSTAGE_CUDA(cudaMemcpy(out.back().data(), layer.output(r), out.back().size() * 2, cudaMemcpyDeviceToHost));
  }
  return out;
}

int64_t count_unwritten(const std::vector<std::vector<uint16_t>>& outs) {
  int64_t bad = 0;
  for (const auto& o : outs)
    for (uint16_t v : o) bad += std::isfinite(bf16_to_float(v)) ? 0 : 1;
  return bad;
}

// Every body on poisoned outputs; fused == unfused bit for bit; sampled
// tokens of every local rank against the fp64 reference; each local
// expert's rows against the routing.
MoeLayerCheck check_config(const MoeLayerBenchOptions& o, World& w, MoeLayer& layer, const LayerInputs& in,
                           const std::vector<MoeRoutes>& routes, const std::vector<Body>& bodies, int T) {
  const MoeShape& s = o.shape;
  const int P = w.size(), E_loc = s.experts / P;
  MoeLayerCheck c;
  std::vector<std::string> failures;
  std::vector<std::pair<std::string, std::vector<std::vector<uint16_t>>>> outs;  // per body that has an output
  for (const auto& [v, plan] : bodies) {
    layer.poison_outputs();
    run_moe_once(w, layer, v, plan);
    layer.check_waits();
    if (v == MoeLayerVariant::compute_only) continue;  // no combine: no output
    outs.emplace_back(moe_body_label(v, plan.schedule), read_outputs(w, layer, T, s.hidden));
    const int64_t bad = int64_t(w.max_over_ranks(double(count_unwritten(outs.back().second))));
    if (bad > 0) failures.push_back(fmt::format("{}: {} output elements unwritten (still poisoned)", outs.back().first, bad));
    c.unwritten = std::max(c.unwritten, bad);
  }
  // Rows each local expert received, against the routing (the dispatch's counts).
  for (int r : w.local_ranks()) {
    const std::vector<int> got = layer.expert_rows(r);
    std::vector<int> want(E_loc, 0);
    for (const MoeRoutes& rt : routes)
      for (int32_t e : rt.ids)
        if (e / E_loc == r) ++want[e % E_loc];
    for (int e = 0; e < E_loc; ++e)
      if (e >= int(got.size()) || got[e] != want[e]) ++c.expert_rows_mismatch;
  }
  c.expert_rows_mismatch = int64_t(w.max_over_ranks(double(c.expert_rows_mismatch)));
  if (c.expert_rows_mismatch > 0)
    failures.push_back(fmt::format("{} experts received other row counts than the routing sends them",
                                   c.expert_rows_mismatch));
  auto finish = [&] {
    c.ok = failures.empty();
    for (const auto& f : failures) c.failure += (c.failure.empty() ? "" : "; ") + f;
    return c;
  };
  if (outs.empty()) return finish();  // compute-only alone: no output to compare
  // Bit for bit: every fused schedule against unfused (or, without it, against the first fused).
  const auto unfused = std::find_if(outs.begin(), outs.end(), [](const auto& x) { return x.first == "unfused"; });
  const auto& base = unfused != outs.end() ? *unfused : outs.front();
  bool all_same = true;
  for (const auto& [label, rows] : outs) {
    if (&rows == &base.second) continue;
    bool same = true;
    for (size_t i = 0; i < rows.size(); ++i)
      same = same && std::memcmp(rows[i].data(), base.second[i].data(), rows[i].size() * 2) == 0;
    same = w.max_over_ranks(same ? 0.0 : 1.0) == 0;
    if (!same) failures.push_back(fmt::format("{} differs from {} (expected bit for bit)", label, base.first));
    all_same = all_same && same;
  }
  if (unfused != outs.end() && outs.size() > 1) c.bit_exact_vs_unfused = all_same;
  // The reference on sampled tokens of every local rank, against every output.
  std::vector<MoeRefToken> tokens;
  for (int r : w.local_ranks())
    for (int t : moe_check_tokens(routes.at(r), E_loc, o.check_tokens > 0 ? o.check_tokens : kDefaultCheckTokens,
                                  o.seed + uint64_t(r)))
      tokens.push_back({r, t});
  const auto ref = moe_layer_reference(in.host(), routes, tokens);
  for (const auto& [label, rows] : outs) {
    std::vector<std::vector<uint16_t>> got;
    for (const MoeRefToken& t : tokens) {
      const auto& o_rank = rows[size_t(w.local_index(t.rank))];
      got.emplace_back(o_rank.begin() + size_t(t.token) * s.hidden, o_rank.begin() + size_t(t.token + 1) * s.hidden);
    }
    double rel = 0, mx = 0;
    moe_compare_rows(ref, got, rel, mx);
    rel = w.max_over_ranks(rel), mx = w.max_over_ranks(mx);
    if (!(rel <= kCheckTolerance))
      failures.push_back(fmt::format("{}: relative error {:.3g} against the fp64 reference exceeds {}", label, rel,
                                     kCheckTolerance));
    c.rel_err = std::max(c.rel_err, rel), c.max_abs_err = std::max(c.max_abs_err, mx);
  }
  c.tokens_checked = int64_t(w.max_over_ranks(double(tokens.size())));
  return finish();
}


}  // namespace

std::string moe_body_label(MoeLayerVariant v, MoeSchedule s) {
  return v == MoeLayerVariant::fused ? "fused/" + to_string(s) : to_string(v);
}

std::string default_moe_profile(Backend b, Placement p) { return default_ulysses_profile(b, p); }

void validate_moe_layer_bench_options(MoeLayerBenchOptions& o) {
  resolve_world_ranks(o.world, 2);
  const MoeShape& s = o.shape;
  const int P = o.world.ranks;
  // P < 1: not known yet (peer: the GPUs found when the world opens); the layer checks E over P again then.
  validate_moe_layer_shape(s, P >= 1 ? P : 1, fmt::format("shape {}", s.name.empty() ? "custom" : s.name));
  if (o.tokens.empty()) throw Error("--tokens: expected at least one token count");
  for (int T : o.tokens)
    if (T < 1 || T > (1 << 20)) throw Error(fmt::format("--tokens: expected 1 .. 2^20 tokens a rank, got {}", T));
  if (inputs_given(o) && o.tokens.size() != 1)
    throw Error("--tokens: the given .npy inputs hold one token count; expected one value");
  if (P >= 1) {
    check_given_sizes(o, P);
    if (!o.ids.empty()) (void)make_routes(o, P, o.tokens.front());  // ids whole, in range, distinct per token
  }
  if (o.variants.empty())
    o.variants = {MoeLayerVariant::fused, MoeLayerVariant::unfused, MoeLayerVariant::compute_only};
  for (size_t i = 0; i < o.variants.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (o.variants[i] == o.variants[j])
        throw Error(fmt::format("--variants: {} given twice; expected each variant once", to_string(o.variants[i])));
  const bool fused = std::find(o.variants.begin(), o.variants.end(), MoeLayerVariant::fused) != o.variants.end();
  if (!o.schedules.empty() && !fused)
    throw Error("--schedules: the fused variant's schedules, which --variants leaves out; expected --variants with fused, or no --schedules");
  if (o.schedules.empty() && fused)
    o.schedules = {MoeSchedule::expert_wave, MoeSchedule::interleaved, MoeSchedule::model_guided};
  for (size_t i = 0; i < o.schedules.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (o.schedules[i] == o.schedules[j])
        throw Error(fmt::format("--schedules: {} given twice; expected each schedule once", to_string(o.schedules[i])));
  if (o.tile != MoeTile::automatic && o.tile != MoeTile::m128n256 && o.tile != MoeTile::m64n256)
    throw Error(fmt::format("--tile {}: not a tile of the fused layer; expected m128n256, m64n256 or auto", to_string(o.tile)));
  if (!(o.timeout_s > 0) || o.timeout_s > 3600)
    throw Error(fmt::format("--timeout: expected 0 < seconds <= 3600, got {}", o.timeout_s));
  if (o.check_tokens < 0) throw Error(fmt::format("--check-tokens: expected >= 1 (or 0: {}), got {}",
                                                  kDefaultCheckTokens, o.check_tokens));
  if (o.rounds < 1) throw Error(fmt::format("--rounds: expected >= 1, got {}", o.rounds));
  if (o.warmup < 0) throw Error(fmt::format("--warmup: expected >= 0, got {}", o.warmup));
  if (o.profile.empty()) o.profile = default_moe_profile(o.world.backend, o.world.placement);
  const bool guided =
      std::find(o.schedules.begin(), o.schedules.end(), MoeSchedule::model_guided) != o.schedules.end();
  if (o.profile == "none") {
    if (guided) throw Error("--profile none: the model-guided schedule needs a profile; expected a profile, or --schedules without it");
  } else {
    try {
      (void)load_profile(o.profile);  // fails early, naming the file
    } catch (const Error& e) {
      throw Error(fmt::format("--profile: {}", e.what()));
    }
  }
}

MoeLayerBenchReport run_moe_layer_bench(MoeLayerBenchOptions o) {
  validate_moe_layer_bench_options(o);
  const int gpus = cuda_device_count();
  if (gpus == 0) throw Error("moe: no CUDA device: this command runs the layer on a GPU; expected a machine with a GPU");
  if (o.world.ranks < 1) {  // peer without --ranks: one rank a GPU, every GPU (as --ranks' help says)
    o.world.ranks = gpus;
    validate_moe_layer_bench_options(o);
  }
  auto world = World::create(o.world);
  World& w = *world;
  const int P = w.size();
  if (o.shape.experts % P != 0)
    throw Error(fmt::format("shape {}: {} experts do not split over {} ranks; expected a rank count that divides the experts (experts % P = 0)", o.shape.name,
                            o.shape.experts, P));
  check_given_sizes(o, P);

  MoeLayerBenchReport rep;
  rep.leader = w.leader();
  rep.world = w.describe();
  rep.backend = w.backend(), rep.placement = w.placement(), rep.P = P;
  rep.shape = o.shape;
  rep.device = device_info(w.device_of(w.local_ranks().front()));
  rep.sms = rep.device.sm_count;
  rep.inputs_given = inputs_given(o);
  rep.profile = o.profile;
  std::optional<Profile> prof;
  if (o.profile != "none") prof = load_profile(o.profile), rep.profile_R_Bps = prof->R_Bps;
  if (o.floor_probe) {
    const UlyssesFloorRate f = floor_rate_on_world(w, "moe");
    rep.probe_R_Bps = f.R_Bps, rep.probe_seconds = f.probe_seconds;
  }

  MoeLayerOptions lo;
  lo.shape = o.shape;
  lo.tokens_max = *std::max_element(o.tokens.begin(), o.tokens.end());
  lo.tile = o.tile;
  lo.timeout_s = o.timeout_s;
  rep.sizes = moe_layer_sizes(lo, P);
  MoeLayer layer(w, lo);  // says so when the sizes do not fit, before any allocation
  rep.tile = layer.tile();
  LayerInputs in(o, w, layer);

  for (int T : o.tokens) {
    MoeLayerConfigResult cfg;
    cfg.tokens = T;
    const std::vector<MoeRoutes> routes = make_routes(o, P, T);
    cfg.traffic = moe_traffic(routes, o.shape.experts, P, o.shape.hidden, w.backend(), w.placement());
    in.set_tokens(T, routes);

    std::vector<Body> bodies;
    for (MoeLayerVariant v : o.variants) {
      if (v != MoeLayerVariant::fused) {
        bodies.push_back({v, MoeSchedulePlan{}});
        continue;
      }
      for (MoeSchedule s : o.schedules) {
        MoeSchedulePlan plan;
        plan.schedule = s;
        if (s == MoeSchedule::model_guided) {
          plan = moe_plan_schedule(o.shape, T, P, rep.sms, layer.tile(), *prof);
          plan.runs_as = plan.schedule;  // expert-wave or interleaved, run as chosen
          plan.schedule = MoeSchedule::model_guided;
        }
        cfg.plans.push_back({s, plan});
        bodies.push_back({v, plan});
      }
    }
    for (const Body& b : bodies) cfg.bodies.push_back(moe_body_label(b.first, b.second.schedule));

    if (o.check) cfg.check = check_config(o, w, layer, in, routes, bodies, T);
    if (o.trace) {
      layer.set_trace(true);
      for (const auto& [s, plan] : cfg.plans) {
        run_moe_once(w, layer, MoeLayerVariant::fused, plan);
        layer.check_waits();
        // Emulated ranks run as one launch, whose trace every rank returns: take it once.
        for (int r : w.local_ranks()) {
          for (const MoeTileTrace& t : layer.trace(r)) cfg.trace.push_back({s, r, t});
          if (w.backend() == Backend::emulated) break;
        }
      }
      layer.set_trace(false);
    }
    if (o.bench && (!cfg.check || cfg.check->ok)) {
      MoeRounds rounds = time_moe_rounds(w, layer, bodies, o.warmup, o.rounds);
      cfg.ms = std::move(rounds.ms);
      cfg.phase_ms = std::move(rounds.phase_ms);
      cfg.sm_clock_mhz = std::move(rounds.sm_clock_mhz);
      cfg.rounds = o.rounds;
    } else if (!o.check && !o.bench) {
      for (const Body& b : bodies) run_moe_once(w, layer, b.first, b.second);  // runs the layer once, no more
      layer.check_waits();
    }
    rep.configs.push_back(std::move(cfg));
  }
  return rep;
}

}  // namespace xstage
