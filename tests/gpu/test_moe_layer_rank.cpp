// The expert-parallel MoE layer on caller-owned buffers (moe_layer_rank.hpp),
// the path the Python package takes over torch symmetric memory: P = 2 ranks
// on one GPU, each with its own symmetric allocation and workspace, the
// pointer tables built here as a framework would, each rank on its own
// stream. Against MoeLayer on an emulated world (the same kernels, tested
// against the fp64 reference in test_moe_layer.cpp): bit for bit, over
// repeated runs with varying T, under CUDA graph replays, and a rank that
// never runs is a timeout naming rank, flag and values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "gpu/need_gpus.hpp"
#include "xstage/comm/world.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/moe/moe_layer.hpp"
#include "xstage/moe/moe_layer_rank.hpp"

using namespace xstage;

namespace {

constexpr int kP = 2;

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

MoeLayerOptions small_options(int T_max, double timeout_s = 20) {
  MoeLayerOptions o;
  o.shape = parse_moe_shape("512/256/8/2");
  o.tokens_max = T_max;
  o.timeout_s = timeout_s;
  return o;
}

// One rank's inputs: x, ids (k distinct a token), weights.
struct RankInput {
  std::vector<uint16_t> x;
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

RankInput make_input(const MoeLayerOptions& o, int T, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  RankInput in;
  const int H = o.shape.hidden, E = o.shape.experts, k = o.shape.topk;
  for (int i = 0; i < T * H; ++i) in.x.push_back(to_bf16(u(rng)));
  for (int t = 0; t < T; ++t) {
    std::vector<int> perm(E);
    for (int e = 0; e < E; ++e) perm[e] = e;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int j = 0; j < k; ++j) in.ids.push_back(perm[j]), in.weights.push_back(0.25f + 0.5f * std::abs(u(rng)));
  }
  return in;
}

std::vector<uint16_t> random_bf16(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = to_bf16(u(rng));
  return v;
}

template <class T>
void upload(void* dst, const std::vector<T>& v) {
  XSTAGE_CUDA(cudaMemcpy(dst, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
}

// What a framework holds for P ranks on one GPU: per rank a symmetric
// allocation and a workspace (zeroed), the [5][P] tables, weights, a stream.
struct CallerRanks {
  MoeLayerOptions o;
  MoeRankLayout l;
  std::vector<void*> sym, ws, w13, w2, out;
  std::vector<cudaStream_t> streams;
  void* tables = nullptr;
  std::vector<void*> mem;

  explicit CallerRanks(const MoeLayerOptions& options) : o(options), l(moe_rank_layout(options, kP)) {
    const int E_loc = o.shape.experts / kP, H = o.shape.hidden, I = o.shape.inter;
    for (int r = 0; r < kP; ++r) {
      sym.push_back(alloc(l.symmetric_bytes));
      ws.push_back(alloc(l.workspace_bytes));
      w13.push_back(alloc(size_t(E_loc) * 2 * I * H * 2));
      w2.push_back(alloc(size_t(E_loc) * H * I * 2));
      out.push_back(alloc(size_t(o.tokens_max) * H * 2));
      cudaStream_t s;
      XSTAGE_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      streams.push_back(s);
    }
    std::vector<void*> t(size_t(kAreaCount) * kP);
    const size_t area[kAreaCount] = {l.x_send, l.routes, l.counts, l.combine, l.flags};
    for (int a = 0; a < kAreaCount; ++a)
      for (int r = 0; r < kP; ++r) t[size_t(a) * kP + r] = static_cast<char*>(sym[r]) + area[a];
    tables = alloc(t.size() * sizeof(void*));
    upload(tables, t);
    moe_rank_prepare(o, kP);
  }
  ~CallerRanks() {
    for (cudaStream_t s : streams) (void)cudaStreamDestroy(s);
    for (void* p : mem) (void)cudaFree(p);
  }
  void* alloc(size_t bytes) {
    void* p = nullptr;
    XSTAGE_CUDA(cudaMalloc(&p, bytes));
    XSTAGE_CUDA(cudaMemset(p, 0, bytes));
    mem.push_back(p);
    return p;
  }
  // The caller's part of a run: tokens into x_send, ids and weights into the workspace.
  void stage(int r, const RankInput& in) {
    upload(static_cast<char*>(sym[r]) + l.x_send, in.x);
    upload(static_cast<char*>(ws[r]) + l.topk_ids, in.ids);
    upload(static_cast<char*>(ws[r]) + l.topk_weights, in.weights);
  }
  MoeRankArgs args(int r, int T, const MoeSchedulePlan& plan) const {
    MoeRankArgs a;
    a.options = o, a.P = kP, a.rank = r;
    a.tables = static_cast<void* const*>(tables), a.workspace = ws[r], a.workspace_bytes = l.workspace_bytes;
    a.w13 = w13[r], a.w2 = w2[r], a.out = out[r], a.T = T, a.plan = plan;
    return a;
  }
  void forward(int r, int T, const MoeSchedulePlan& plan) { moe_rank_forward(args(r, T, plan), streams[r]); }
  void sync() {
    for (cudaStream_t s : streams) XSTAGE_CUDA(cudaStreamSynchronize(s));
  }
  std::vector<uint16_t> output(int r, int T) {
    std::vector<uint16_t> v(size_t(T) * o.shape.hidden);
    XSTAGE_CUDA(cudaMemcpy(v.data(), out[r], v.size() * 2, cudaMemcpyDeviceToHost));
    return v;
  }
  std::string records(int r) {
    std::vector<char> host(l.records_bytes);
    XSTAGE_CUDA(cudaMemcpy(host.data(), static_cast<char*>(ws[r]) + l.records, host.size(), cudaMemcpyDeviceToHost));
    return moe_rank_describe_records(host.data(), kP, r, o.shape.experts);
  }
};

// MoeLayer on an emulated world with the same weights and inputs.
struct Reference {
  std::unique_ptr<World> w;
  std::unique_ptr<MoeLayer> layer;
  Reference(const MoeLayerOptions& o, const CallerRanks& c) {
    w = World::create({Backend::emulated, kP, Placement::device, 0});
    layer = std::make_unique<MoeLayer>(*w, o);
    const int E_loc = o.shape.experts / kP, H = o.shape.hidden, I = o.shape.inter;
    for (int r = 0; r < kP; ++r) {
      XSTAGE_CUDA(cudaMemcpy(layer->w13(r), c.w13[r], size_t(E_loc) * 2 * I * H * 2, cudaMemcpyDeviceToDevice));
      XSTAGE_CUDA(cudaMemcpy(layer->w2(r), c.w2[r], size_t(E_loc) * H * I * 2, cudaMemcpyDeviceToDevice));
    }
  }
  std::vector<std::vector<uint16_t>> run(const std::vector<RankInput>& in, const std::vector<int>& T,
                                         const MoeSchedulePlan& plan) {
    const int H = layer->options().shape.hidden;
    for (int r = 0; r < kP; ++r) {
      upload(layer->x(r), in[r].x);
      upload(layer->topk_ids(r), in[r].ids);
      upload(layer->topk_weights(r), in[r].weights);
      layer->set_tokens(r, T[r]);
    }
    XSTAGE_CUDA(cudaDeviceSynchronize());
    layer->run(MoeLayerVariant::fused, plan);
    layer->check_waits();
    std::vector<std::vector<uint16_t>> out;
    for (int r = 0; r < kP; ++r) {
      out.emplace_back(size_t(T[r]) * H);
      XSTAGE_CUDA(cudaMemcpy(out.back().data(), layer->output(r), out.back().size() * 2, cudaMemcpyDeviceToHost));
    }
    return out;
  }
};

void fill_weights(CallerRanks& c) {
  const int E_loc = c.o.shape.experts / kP, H = c.o.shape.hidden, I = c.o.shape.inter;
  for (int r = 0; r < kP; ++r) {
    upload(c.w13[r], random_bf16(size_t(E_loc) * 2 * I * H, 100 + r, 0.08f));
    upload(c.w2[r], random_bf16(size_t(E_loc) * H * I, 200 + r, 0.08f));
  }
}

int nan_count(const std::vector<uint16_t>& v) {
  int n = 0;
  for (uint16_t b : v) n += (b & 0x7F80) == 0x7F80;
  return n;
}

MoeSchedulePlan interleaved() {
  MoeSchedulePlan p;
  p.schedule = p.runs_as = MoeSchedule::interleaved;
  return p;
}

}  // namespace

TEST(MoeLayerRank, LayoutIsAlignedAndReportsTheSizes) {
  const MoeLayerOptions o = small_options(64);
  const MoeRankLayout l = moe_rank_layout(o, kP);
  for (size_t off : {l.x_send, l.routes, l.counts, l.combine, l.flags, l.pool_x, l.pool_h, l.topk_ids,
                     l.topk_weights, l.records, l.epoch})
    EXPECT_EQ(off % 256, 0u);
  const MoeLayerSizes z = moe_layer_sizes(o, kP);
  EXPECT_GE(l.symmetric_bytes, z.symmetric_total());
  EXPECT_LT(l.symmetric_bytes, z.symmetric_total() + 5 * 256);
  EXPECT_GE(l.workspace_bytes, z.pool_x + z.pool_h);
  EXPECT_EQ(l.rows_cap, z.rows_cap);
  EXPECT_THROW(moe_rank_layout(small_options(0), kP), Error);
}

TEST(MoeLayerRank, TwoRanksOnOneGpuMatchMoeLayerBitForBit) {
  XSTAGE_NEED_GPUS(1);
  const MoeLayerOptions o = small_options(96);
  CallerRanks c(o);
  fill_weights(c);
  Reference ref(o, c);
  // Repeated runs (the device epoch advances, no flag reset), T varying per
  // rank (0 included), every schedule.
  const std::vector<std::vector<int>> tokens = {{96, 96}, {37, 96}, {0, 5}, {96, 64}};
  const MoeSchedule schedules[] = {MoeSchedule::interleaved, MoeSchedule::expert_wave, MoeSchedule::model_guided};
  uint32_t seed = 1;
  for (const auto& T : tokens)
    for (MoeSchedule s : schedules) {
      const MoeSchedulePlan plan = moe_rank_plan(o, kP, std::max(T[0], T[1]), s, "", device_info(0).sm_count);
      std::vector<RankInput> in;
      for (int r = 0; r < kP; ++r) in.push_back(make_input(o, T[r], seed++));
      for (int r = 0; r < kP; ++r) c.stage(r, in[r]);
      XSTAGE_CUDA(cudaDeviceSynchronize());
      for (int r = 0; r < kP; ++r) c.forward(r, T[r], plan);
      c.sync();
      const auto want = ref.run(in, T, plan);
      for (int r = 0; r < kP; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r) + " T " + std::to_string(T[r]) + " " + to_string(s));
        EXPECT_EQ(c.records(r), "");
        const auto got = c.output(r, T[r]);
        EXPECT_EQ(nan_count(got), 0);
        EXPECT_TRUE(got == want[r]) << "outputs differ from MoeLayer's";
      }
    }
}

TEST(MoeLayerRank, GraphReplaysAdvanceTheEpoch) {
  XSTAGE_NEED_GPUS(1);
  const MoeLayerOptions o = small_options(64);
  CallerRanks c(o);
  fill_weights(c);
  Reference ref(o, c);
  const MoeSchedulePlan plan = interleaved();
  const std::vector<int> T = {64, 50};
  // One eager run first (the epoch is 1 afterwards), then capture each rank's run.
  std::vector<RankInput> in = {make_input(o, T[0], 7), make_input(o, T[1], 8)};
  for (int r = 0; r < kP; ++r) c.stage(r, in[r]);
  XSTAGE_CUDA(cudaDeviceSynchronize());
  for (int r = 0; r < kP; ++r) c.forward(r, T[r], plan);
  c.sync();
  std::vector<cudaGraphExec_t> exec(kP);
  for (int r = 0; r < kP; ++r) {
    cudaGraph_t g;
    XSTAGE_CUDA(cudaStreamBeginCapture(c.streams[r], cudaStreamCaptureModeThreadLocal));
    c.forward(r, T[r], plan);
    XSTAGE_CUDA(cudaStreamEndCapture(c.streams[r], &g));
    XSTAGE_CUDA(cudaGraphInstantiate(&exec[r], g, 0));
    XSTAGE_CUDA(cudaGraphDestroy(g));
  }
  for (int replay = 0; replay < 4; ++replay) {
    in = {make_input(o, T[0], 20 + 2 * replay), make_input(o, T[1], 21 + 2 * replay)};
    for (int r = 0; r < kP; ++r) c.stage(r, in[r]);
    XSTAGE_CUDA(cudaDeviceSynchronize());
    for (int r = 0; r < kP; ++r) XSTAGE_CUDA(cudaGraphLaunch(exec[r], c.streams[r]));
    c.sync();
    const auto want = ref.run(in, T, plan);
    for (int r = 0; r < kP; ++r) {
      SCOPED_TRACE("replay " + std::to_string(replay) + " rank " + std::to_string(r));
      EXPECT_EQ(c.records(r), "");
      EXPECT_TRUE(c.output(r, T[r]) == want[r]);
    }
  }
  for (cudaGraphExec_t e : exec) XSTAGE_CUDA(cudaGraphExecDestroy(e));
}

TEST(MoeLayerRank, ARankThatNeverRunsIsATimeoutNamingRankFlagAndValues) {
  XSTAGE_NEED_GPUS(1);
  const MoeLayerOptions o = small_options(32, 0.2);
  CallerRanks c(o);
  fill_weights(c);
  c.stage(0, make_input(o, 32, 3));
  XSTAGE_CUDA(cudaDeviceSynchronize());
  c.forward(0, 32, interleaved());  // rank 1 never runs: its counts never come
  c.sync();
  const std::string m = c.records(0);
  EXPECT_NE(m.find("dispatch wait timed out: rank 0 waited on flag 1 (the counts of source 1)"), std::string::npos)
      << m;
  EXPECT_NE(m.find("expected >= 1, saw 0"), std::string::npos) << m;
}

TEST(MoeLayerRank, BadArgumentsThrowBeforeAnyLaunch) {
  XSTAGE_NEED_GPUS(1);
  const MoeLayerOptions o = small_options(16);
  CallerRanks c(o);
  const MoeSchedulePlan plan = interleaved();
  auto expect_error = [&](MoeRankArgs a, const std::string& what) {
    try {
      moe_rank_forward(a, c.streams[0]);
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  MoeRankArgs a = c.args(0, 17, plan);
  expect_error(a, "T = 17 tokens: expected 0 .. T_max = 16");
  a = c.args(0, 4, plan);
  a.rank = 2;
  expect_error(a, "rank 2: expected 0 .. P - 1 = 1");
  a = c.args(0, 4, plan);
  a.workspace_bytes = 1;
  expect_error(a, "workspace of 1 bytes");
  a = c.args(0, 4, plan);
  a.w2 = nullptr;
  expect_error(a, "w2: expected a device pointer");
  XSTAGE_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(c.records(0), "");
}
