// The attention forward kernel against the fp64 CPU reference: S = 1, odd
// lengths, lengths that are no multiple of any tile, D = 64 and 128, B = 2,
// H = 3, strided tensors inside larger buffers, LSE; the poisoned output must
// be fully written (and nothing outside the tensor touched).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

#include "cli_runner.hpp"
#include "gpu/need_gpus.hpp"
#include "xstage/attention/attention.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"

using namespace xstage;

namespace {

struct Case {
  int B, H, S, S_kv, D;
  bool strided;  // tensors inside larger buffers (padded heads and rows)
  float scale;   // NaN: default
  AttentionKernel kernel = AttentionKernel::automatic;
};

std::string name(const Case& c) {
  std::string k = to_string(c.kernel);
  for (char& ch : k)
    if (ch == '-') ch = '_';
  return "B" + std::to_string(c.B) + "H" + std::to_string(c.H) + "S" + std::to_string(c.S) + "Skv" +
         std::to_string(c.S_kv) + "D" + std::to_string(c.D) + (c.strided ? "strided" : "") + "_" + k;
}

float hash_value(uint64_t i, uint64_t salt) {
  uint64_t z = i * 0x9e3779b97f4a7c15ull + salt * 0xbf58476d1ce4e5b9ull + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return float((double(z >> 11) * (1.0 / 9007199254740992.0)) * 4 - 2);  // [-2, 2)
}

// A [B, S, H, D] tensor stored with strides inside a buffer of `elems` bf16.
struct Strided {
  AttentionStrides st;
  size_t elems = 0;
};
Strided layout(int B, int S, int H, int D, bool strided) {
  if (!strided) return {contiguous_bshd(S, H, D), size_t(B) * S * H * D};
  // head stride D + 16, seq stride H * (D + 16) + 8, batch stride S * seq + 24: all multiples of 8
  Strided l;
  l.st.h = D + 16;
  l.st.s = int64_t(H) * (D + 16) + 8;
  l.st.b = int64_t(S) * l.st.s + 24;
  l.elems = size_t(B) * l.st.b + 64;
  return l;
}

template <typename T>
struct DevBuf {
  T* p = nullptr;
  explicit DevBuf(size_t n) { XSTAGE_CUDA(cudaMalloc(&p, n * sizeof(T))); }
  ~DevBuf() { cudaFree(p); }
};

void run_case(const Case& c) {
  const Strided lq = layout(c.B, c.S, c.H, c.D, c.strided), lk = layout(c.B, c.S_kv, c.H, c.D, c.strided);
  const Strided lo = layout(c.B, c.S, c.H, c.D, c.strided);
  // Dense float copies (bf16-rounded) for the reference; strided bf16 buffers for the kernel.
  const size_t nq = size_t(c.B) * c.S * c.H * c.D, nkv = size_t(c.B) * c.S_kv * c.H * c.D;
  std::vector<float> q(nq), k(nkv), v(nkv);
  std::vector<uint16_t> bq(lq.elems, 0x7fc1), bk(lk.elems, 0x7fc1), bv(lk.elems, 0x7fc1);  // NaN outside
  auto fill = [&](std::vector<float>& dense, std::vector<uint16_t>& buf, const Strided& l, int S, uint64_t salt) {
    for (int b = 0; b < c.B; ++b)
      for (int s = 0; s < S; ++s)
        for (int h = 0; h < c.H; ++h)
          for (int d = 0; d < c.D; ++d) {
            const size_t i = ((size_t(b) * S + s) * c.H + h) * c.D + d;
            const uint16_t x = float_to_bf16(hash_value(i, salt));
            dense[i] = bf16_to_float(x);
            buf[b * l.st.b + s * l.st.s + h * l.st.h + d] = x;
          }
  };
  fill(q, bq, lq, c.S, 1);
  fill(k, bk, lk, c.S_kv, 2);
  fill(v, bv, lk, c.S_kv, 3);

  DevBuf<uint16_t> dq(lq.elems), dk(lk.elems), dv(lk.elems), d_o(lo.elems);
  DevBuf<float> dlse(size_t(c.B) * c.H * c.S);
  XSTAGE_CUDA(cudaMemcpy(dq.p, bq.data(), lq.elems * 2, cudaMemcpyHostToDevice));
  XSTAGE_CUDA(cudaMemcpy(dk.p, bk.data(), lk.elems * 2, cudaMemcpyHostToDevice));
  XSTAGE_CUDA(cudaMemcpy(dv.p, bv.data(), lk.elems * 2, cudaMemcpyHostToDevice));
  XSTAGE_CUDA(cudaMemset(d_o.p, 0xff, lo.elems * 2));  // poison: NaN
  XSTAGE_CUDA(cudaMemset(dlse.p, 0xff, size_t(c.B) * c.H * c.S * 4));

  AttentionForwardArgs a;
  a.B = c.B, a.H = c.H, a.S_q = c.S, a.S_kv = c.S_kv, a.D = c.D, a.scale = c.scale;
  a.q = dq.p, a.k = dk.p, a.v = dv.p, a.o = d_o.p, a.lse = dlse.p;
  a.q_stride = lq.st, a.k_stride = a.v_stride = lk.st, a.o_stride = lo.st;
  a.kernel = c.kernel;
  attention_forward(a);
  XSTAGE_CUDA(cudaDeviceSynchronize());

  std::vector<uint16_t> ho(lo.elems);
  std::vector<float> hlse(size_t(c.B) * c.H * c.S);
  XSTAGE_CUDA(cudaMemcpy(ho.data(), d_o.p, lo.elems * 2, cudaMemcpyDeviceToHost));
  XSTAGE_CUDA(cudaMemcpy(hlse.data(), dlse.p, hlse.size() * 4, cudaMemcpyDeviceToHost));

  const AttentionReference ref{c.B, c.H, c.S, c.S_kv, c.D, double(effective_scale(a)), q.data(), k.data(), v.data()};
  std::vector<double> out(c.D);
  std::vector<char> inside(lo.elems, 0);
  double num = 0, den = 0, lse_err = 0;
  size_t unwritten = 0;
  for (int b = 0; b < c.B; ++b)
    for (int s = 0; s < c.S; ++s)
      for (int h = 0; h < c.H; ++h) {
        const double lse = ref.row(b, s, h, out.data());
        for (int d = 0; d < c.D; ++d) {
          const size_t at = b * lo.st.b + s * lo.st.s + h * lo.st.h + d;
          inside[at] = 1;
          const float got = bf16_to_float(ho[at]);
          if (!std::isfinite(got)) {
            ++unwritten;
            continue;
          }
          num += (got - out[d]) * (got - out[d]);
          den += out[d] * out[d];
        }
        const float gl = hlse[(size_t(b) * c.H + h) * c.S + s];
        lse_err = std::max(lse_err, std::isfinite(gl) ? std::fabs(gl - lse) : INFINITY);
      }
  EXPECT_EQ(unwritten, 0u) << "output elements left poisoned";
  const double rel = std::sqrt(num / den);
  EXPECT_LE(rel, 1e-2) << "relative error";
  EXPECT_LE(lse_err, 1e-3 * std::max(1.0, std::fabs(double(hlse[0])))) << "lse max abs error";
  size_t touched_outside = 0;
  for (size_t i = 0; i < lo.elems; ++i) touched_outside += !inside[i] && ho[i] != 0xffff;
  EXPECT_EQ(touched_outside, 0u) << "kernel wrote outside the O tensor";
  std::printf("[ %s ] rel_err %.3e lse_err %.3e\n", name(c).c_str(), rel, lse_err);
}

class AttentionFwd : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionFwd, MatchesFp64Reference) {
  XSTAGE_NEED_GPUS(1);
  run_case(GetParam());
}

// Every shape runs on the default kernel and on each kernel explicitly.
std::vector<Case> cases() {
  std::vector<Case> v;
  for (AttentionKernel k : {AttentionKernel::automatic, AttentionKernel::mma_sync, AttentionKernel::wgmma_basic,
                            AttentionKernel::wgmma_overlap, AttentionKernel::wgmma_pingpong,
                            AttentionKernel::wgmma_n192, AttentionKernel::wgmma_m192,
                            AttentionKernel::wgmma_m192_overlap}) {
    for (int D : {64, 128}) {
      if ((k == AttentionKernel::wgmma_n192 || k == AttentionKernel::wgmma_m192 ||
           k == AttentionKernel::wgmma_m192_overlap) &&
          D != 64)
        continue;
      for (int S : {1, 7, 129, 333})
        for (int S_kv : {1, 65, 300}) v.push_back({1, 1, S, S_kv, D, false, NAN, k});
      v.push_back({2, 3, 129, 300, D, false, NAN, k});
      v.push_back({2, 3, 333, 65, D, true, NAN, k});
      v.push_back({2, 3, 1, 1, D, true, NAN, k});
      v.push_back({1, 2, 200, 700, D, false, 0.3f, k});  // explicit scale, several KV tiles
      v.push_back({1, 1, 64, 64, D, true, NAN, k});       // exact tile multiples (mma.sync)
      v.push_back({1, 2, 256, 384, D, true, NAN, k});     // exact tile multiples (wgmma: 128 x 128, 128 x 192)
      v.push_back({1, 2, 384, 256, D, false, NAN, k});    // exact tile multiples (wgmma: 192 x 128)
      v.push_back({1, 2, 130, 500, D, false, -0.2f, k});  // negative scale (max of -s), several KV tiles
      v.push_back({1, 2, 70, 300, D, false, 0.f, k});     // scale 0: uniform weights, masked last tile
      v.push_back({2, 40, 333, 200, D, false, NAN, k});   // 240 tiles: more than one per CTA (persistent grid)
    }
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionFwd, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return name(i.param); });

TEST(AttentionFwdLarge, SeveralCtasAndLongKv) {
  XSTAGE_NEED_GPUS(1);
  for (AttentionKernel k : {AttentionKernel::automatic, AttentionKernel::mma_sync, AttentionKernel::wgmma_pingpong}) {
    run_case({1, 4, 1000, 2047, 128, false, NAN, k});
    run_case({2, 2, 777, 1500, 64, true, NAN, k});
  }
  for (AttentionKernel k : {AttentionKernel::wgmma_n192, AttentionKernel::wgmma_m192, AttentionKernel::wgmma_m192_overlap})
    run_case({2, 2, 777, 1500, 64, true, NAN, k});
}

TEST(AttentionFwdLarge, KernelNames) {
  EXPECT_EQ(parse_attention_kernel("wgmma"), AttentionKernel::wgmma_pingpong);
  EXPECT_EQ(parse_attention_kernel("mma"), AttentionKernel::mma_sync);
  EXPECT_THROW(parse_attention_kernel("fast"), Error);
  for (AttentionKernel k : {AttentionKernel::mma_sync, AttentionKernel::wgmma_basic, AttentionKernel::wgmma_overlap,
                            AttentionKernel::wgmma_pingpong, AttentionKernel::wgmma_n192, AttentionKernel::wgmma_m192,
                            AttentionKernel::wgmma_m192_overlap})
    EXPECT_EQ(parse_attention_kernel(to_string(k)), k);
  // The defaults (no GPU needed): ping-pong wgmma at D=128, three consumer
  // warpgroups (192 query rows) at D=64.
  EXPECT_EQ(attention_default_kernel(128), AttentionKernel::wgmma_pingpong);
  EXPECT_EQ(attention_default_kernel(64), AttentionKernel::wgmma_m192_overlap);
  EXPECT_NE(attention_kernel_name(64).find("BLOCK_M=192"), std::string::npos) << attention_kernel_name(64);
  EXPECT_NE(attention_kernel_name(128).find("wgmma"), std::string::npos) << attention_kernel_name(128);
  EXPECT_NE(attention_kernel_name(128, AttentionKernel::mma_sync).find("mma.sync"), std::string::npos);
  EXPECT_NE(attention_kernel_name(128, AttentionKernel::wgmma_n192).find("none"), std::string::npos);
  EXPECT_NE(attention_kernel_name(64, AttentionKernel::wgmma_m192).find("BLOCK_M=192"), std::string::npos);
  EXPECT_NE(attention_kernel_name(128, AttentionKernel::wgmma_m192).find("none"), std::string::npos);
}

TEST(AttentionFwdLarge, RejectsBadArguments) {
  XSTAGE_NEED_GPUS(1);
  AttentionForwardArgs a;
  a.B = a.H = a.S_q = a.S_kv = 1;
  a.D = 80;
  EXPECT_THROW(attention_forward(a), Error);
}

TEST(AttentionCliGpu, CheckPassesAndJsonHasKeys) {
  XSTAGE_NEED_GPUS(1);
  for (const char* kernel : {"auto", "mma", "wgmma"}) {
    const CliRun r = run_cli(std::string("attn --B 2 --S 257 --S-kv 131 --H 3 --D 64 --check --bench --iters 5 --json "
                                         "--kernel ") +
                             kernel);
    ASSERT_EQ(r.rc, 0) << r.out;
    for (const char* key :
         {"\"rel_err\"", "\"tflops\"", "\"median_ms\"", "\"check_pass\": true", "\"unwritten\": 0"})
      EXPECT_NE(r.out.find(key), std::string::npos) << key << "\n" << r.out;
  }
  const CliRun bad = run_cli("attn --S 64 --kernel fast");
  EXPECT_NE(bad.rc, 0) << bad.out;
}

}  // namespace
