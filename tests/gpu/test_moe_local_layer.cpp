// The one-GPU MoE layer (moe_local_layer: routing count and scatter, the
// grouped GEMMs, the combine) against an fp64 CPU reference: odd token
// counts, experts with no rows, k = 1, 2, 8, int32 and int64 ids; the same
// bits on a second run over a poisoned output; bad ids (out of range,
// repeated) left out and recorded.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "gpu/need_gpus.hpp"
#include "xstage/attention/attention.hpp"  // bf16 conversions
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/moe/moe.hpp"
#include "xstage/moe/moe_local_layer.hpp"

using namespace xstage;

namespace {

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { XSTAGE_CUDA(cudaMalloc(&p, bytes < 16 ? 16 : bytes)); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

template <class T>
void upload(DeviceBuffer& d, const std::vector<T>& h) {
  XSTAGE_CUDA(cudaMemcpy(d.p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}

struct Case {
  int T, H, I, E, k, used_every;  // experts e with e % used_every == 0 get rows
  bool ids_int64;
};

struct Problem {
  std::vector<uint16_t> x, w13, w13i, w2;
  std::vector<int64_t> ids;  // as drawn; uploaded as int32 or int64
  std::vector<float> wts;
};

Problem draw(const Case& c, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::uniform_real_distribution<float> u(0.05f, 1.05f);
  Problem p;
  const auto fill = [&](std::vector<uint16_t>& v, size_t count, float scale) {
    v.resize(count);
    for (auto& e : v) e = float_to_bf16(n(gen) * scale);
  };
  fill(p.x, size_t(c.T) * c.H, 0.5f);
  fill(p.w13, size_t(c.E) * 2 * c.I * c.H, 1.f / std::sqrt(float(c.H)));
  fill(p.w2, size_t(c.E) * c.H * c.I, 1.f / std::sqrt(float(c.I)));
  p.w13i.resize(p.w13.size());
  moe_interleave_w13(p.w13.data(), p.w13i.data(), c.E, c.I, c.H);
  std::vector<int> used;
  for (int e = 0; e < c.E; e += c.used_every) used.push_back(e);
  for (int t = 0; t < c.T; ++t) {
    std::vector<int> pick = used;
    std::shuffle(pick.begin(), pick.end(), gen);
    for (int j = 0; j < c.k; ++j) p.ids.push_back(pick[size_t(j)]), p.wts.push_back(u(gen));
  }
  return p;
}

// out[t] = sum over valid pairs of w * W2[e] SwiGLU(W13[e] x[t]), the hidden
// rounded to bf16 as the layer stores it between L1 and L2.
std::vector<double> reference(const Case& c, const Problem& p) {
  std::vector<double> out(size_t(c.T) * c.H, 0.0), gu(size_t(2) * c.I);
  std::vector<float> xf(size_t(c.H)), hf(size_t(c.I)), w13f(p.w13i.size()), w2f(p.w2.size());
  for (size_t i = 0; i < w13f.size(); ++i) w13f[i] = bf16_to_float(p.w13i[i]);
  for (size_t i = 0; i < w2f.size(); ++i) w2f[i] = bf16_to_float(p.w2[i]);
  std::vector<double> h(size_t(c.I)), y(size_t(c.H));
  for (int t = 0; t < c.T; ++t) {
    for (int i = 0; i < c.H; ++i) xf[size_t(i)] = bf16_to_float(p.x[size_t(t) * c.H + i]);
    for (int j = 0; j < c.k; ++j) {
      const int64_t e = p.ids[size_t(t) * c.k + j];
      bool valid = e >= 0 && e < c.E;
      for (int i = 0; i < j && valid; ++i) valid = p.ids[size_t(t) * c.k + i] != e;
      if (!valid) continue;
      moe_reference_row(xf.data(), w13f.data() + size_t(e) * 2 * c.I * c.H, c.H, 2 * c.I, gu.data());
      moe_reference_swiglu(gu.data(), c.I, p.wts[size_t(t) * c.k + j], h.data());
      for (int i = 0; i < c.I; ++i) hf[size_t(i)] = bf16_to_float(float_to_bf16(float(h[size_t(i)])));
      moe_reference_row(hf.data(), w2f.data() + size_t(e) * c.H * c.I, c.I, c.H, y.data());
      for (int i = 0; i < c.H; ++i) out[size_t(t) * c.H + i] += y[size_t(i)];
    }
  }
  return out;
}

struct LayerRun {
  std::vector<uint16_t> out;
  std::vector<int32_t> record;
};

LayerRun run_layer(const Case& c, const Problem& p) {
  MoeLocalLayerArgs a;
  a.T = c.T, a.H = c.H, a.I = c.I, a.E = c.E, a.k = c.k, a.ids_int64 = c.ids_int64;
  const MoeLocalLayerSizes s = moe_local_layer_sizes(a);
  DeviceBuffer x(p.x.size() * 2), w13(p.w13i.size() * 2), w2(p.w2.size() * 2), out(p.x.size() * 2),
      ids(p.ids.size() * 8), wts(p.wts.size() * 4), scratch(s.scratch_bytes), ws(s.workspace_bytes),
      record(kMoeRouteErrorWords * 4);
  upload(x, p.x), upload(w13, p.w13i), upload(w2, p.w2), upload(wts, p.wts);
  if (c.ids_int64) {
    upload(ids, p.ids);
  } else {
    upload(ids, std::vector<int32_t>(p.ids.begin(), p.ids.end()));
  }
  XSTAGE_CUDA(cudaMemset(ws.p, 0, s.workspace_bytes < 16 ? 16 : s.workspace_bytes));
  XSTAGE_CUDA(cudaMemset(record.p, 0, kMoeRouteErrorWords * 4));
  a.x = x.p, a.w13 = w13.p, a.w2 = w2.p, a.topk_ids = ids.p, a.topk_weights = wts.p, a.out = out.p;
  a.scratch = scratch.p, a.scratch_bytes = s.scratch_bytes;
  a.workspace = s.workspace_bytes > 0 ? ws.p : nullptr, a.workspace_bytes = s.workspace_bytes;
  a.error = static_cast<int32_t*>(record.p);
  LayerRun r;
  r.out.resize(p.x.size());
  std::vector<uint16_t> first(p.x.size());
  for (int pass = 0; pass < 2; ++pass) {  // the second over a poisoned output and scratch: the same bits
    XSTAGE_CUDA(cudaMemset(out.p, 0xFF, p.x.size() * 2));  // bf16 NaN
    XSTAGE_CUDA(cudaMemset(scratch.p, 0xFF, s.scratch_bytes));
    moe_local_layer(a, nullptr);
    XSTAGE_CUDA(cudaDeviceSynchronize());
    XSTAGE_CUDA(cudaMemcpy((pass == 0 ? first : r.out).data(), out.p, p.x.size() * 2, cudaMemcpyDeviceToHost));
  }
  EXPECT_EQ(std::memcmp(first.data(), r.out.data(), first.size() * 2), 0) << "two runs differ";
  r.record.resize(kMoeRouteErrorWords);
  XSTAGE_CUDA(cudaMemcpy(r.record.data(), record.p, kMoeRouteErrorWords * 4, cudaMemcpyDeviceToHost));
  return r;
}

void expect_close(const Case& c, const std::vector<uint16_t>& got, const std::vector<double>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = bf16_to_float(got[i]);
    ASSERT_TRUE(std::isfinite(g)) << "element " << i << " (token " << i / size_t(c.H) << ") not written";
    err += (g - want[i]) * (g - want[i]);
    norm += want[i] * want[i];
  }
  EXPECT_LT(std::sqrt(err / norm), 6e-3);
}

class MoeLocalLayer : public ::testing::TestWithParam<Case> {};

TEST_P(MoeLocalLayer, MatchesTheCpuReference) {
  XSTAGE_NEED_GPUS(1);
  const Case c = GetParam();
  const Problem p = draw(c, uint32_t(c.T * 31 + c.E));
  const LayerRun r = run_layer(c, p);
  expect_close(c, r.out, reference(c, p));
  EXPECT_EQ(r.record[0], 0) << describe_moe_route_error(r.record.data());
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoeLocalLayer,
                         ::testing::Values(Case{37, 256, 128, 8, 2, 2, false},  // half the experts empty
                                           Case{300, 512, 384, 16, 8, 1, true},
                                           Case{129, 384, 128, 4, 1, 3, false},  // k = 1, experts 0 and 3 only
                                           Case{1, 256, 128, 1, 1, 1, true},
                                           Case{50, 128, 64, 3, 2, 1, false},    // rows of 16 vectors: half a warp
                                           Case{45, 1152, 128, 4, 2, 1, true},   // a last pass of 16 vectors
                                           Case{2049, 256, 128, 32, 8, 2, false}));  // 128 routing CTAs

TEST(MoeLocalLayerIds, BadOnesAreLeftOutAndRecorded) {
  XSTAGE_NEED_GPUS(1);
  const Case c{40, 256, 128, 4, 2, 1, true};
  Problem p = draw(c, 77);
  p.ids[size_t(5) * 2 + 1] = 9;                   // out of range
  p.ids[size_t(6) * 2 + 1] = p.ids[size_t(6) * 2];  // repeated
  p.ids[size_t(7) * 2] = -1, p.ids[size_t(7) * 2 + 1] = int64_t(1) << 40;  // a token with nothing routed
  const LayerRun r = run_layer(c, p);
  expect_close(c, r.out, reference(c, p));  // the reference leaves the same pairs out
  for (int i = 0; i < c.H; ++i) EXPECT_EQ(r.out[size_t(7) * c.H + i] & 0x7FFF, 0) << "token 7 had no pair";
  ASSERT_EQ(r.record[0], 1);
  const std::string m = describe_moe_route_error(r.record.data());
  EXPECT_NE(m.find("(the pair was left out)"), std::string::npos) << m;
}

TEST(MoeLocalLayerIds, SizesAreCheckedBeforeAnyLaunch) {
  MoeLocalLayerArgs a;
  a.T = 10, a.H = 256, a.I = 128, a.E = 4, a.k = 5;
  EXPECT_THROW(validate_moe_local_layer(a), Error);
  a.k = 2, a.E = 1025;
  EXPECT_THROW(validate_moe_local_layer(a), Error);
}

}  // namespace
