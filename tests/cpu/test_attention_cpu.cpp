// The attention pieces that run without a GPU: the fp64 reference, bf16
// rounding, argument validation, and the command's argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cli_runner.hpp"
#include "xstage/attention/attention.hpp"
#include "xstage/core/error.hpp"

using namespace xstage;

TEST(AttentionReference, SingleKeyGivesItsValue) {
  const int D = 64, H = 2;
  std::vector<float> q(1 * 3 * H * D), k(1 * 1 * H * D), v(1 * 1 * H * D);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(float(i));
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::cos(float(i));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) - 50.f;
  const AttentionReference ref{1, H, 3, 1, D, 0.125, q.data(), k.data(), v.data()};
  std::vector<double> out(D);
  const double lse = ref.row(0, 2, 1, out.data());
  for (int d = 0; d < D; ++d) EXPECT_DOUBLE_EQ(out[d], v[1 * D + d]);
  double s = 0;
  for (int d = 0; d < D; ++d) s += double(q[(2 * H + 1) * D + d]) * k[1 * D + d];
  EXPECT_NEAR(lse, 0.125 * s, 1e-12);  // log(exp(x)) = x
}

TEST(AttentionReference, MatchesNaiveSoftmax) {
  const int B = 2, H = 3, S = 5, Skv = 7, D = 64;
  std::vector<float> q(B * S * H * D), k(B * Skv * H * D), v(B * Skv * H * D);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.37f * float(i));
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::cos(0.11f * float(i));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.05f * float(i) + 1);
  const double scale = 0.3;
  const AttentionReference ref{B, H, S, Skv, D, scale, q.data(), k.data(), v.data()};
  std::vector<double> out(D);
  const int b = 1, s = 3, h = 2;
  const double lse = ref.row(b, s, h, out.data());
  auto at = [&](const std::vector<float>& x, int SS, int bb, int ss, int d) {
    return double(x[((size_t(bb) * SS + ss) * H + h) * D + d]);
  };
  std::vector<double> p(Skv);
  double z = 0;
  for (int j = 0; j < Skv; ++j) {
    double a = 0;
    for (int d = 0; d < D; ++d) a += at(q, S, b, s, d) * at(k, Skv, b, j, d);
    p[j] = std::exp(scale * a);
    z += p[j];
  }
  EXPECT_NEAR(lse, std::log(z), 1e-12);
  for (int d = 0; d < D; ++d) {
    double o = 0;
    for (int j = 0; j < Skv; ++j) o += p[j] / z * at(v, Skv, b, j, d);
    EXPECT_NEAR(out[d], o, 1e-12);
  }
}

TEST(AttentionBf16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.f), 0x3f80);
  EXPECT_EQ(bf16_to_float(0x3f80), 1.f);
  EXPECT_EQ(float_to_bf16(1.f + std::ldexp(1.f, -8)), 0x3f80);            // tie -> even
  EXPECT_EQ(float_to_bf16(1.f + 3 * std::ldexp(1.f, -8)), 0x3f82);        // tie -> even (up)
  EXPECT_EQ(float_to_bf16(1.f + std::ldexp(1.f, -8) + std::ldexp(1.f, -12)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  EXPECT_TRUE(std::isnan(bf16_to_float(0xffff)));  // the poison pattern
}

TEST(AttentionArgs, ValidationNamesTheArgument) {
  AttentionForwardArgs a;
  a.B = 1, a.H = 2, a.S_q = 3, a.S_kv = 4, a.D = 96;
  auto msg = [&](bool ptrs) {
    try {
      validate_attention_args(a, ptrs);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg(false).find("head dim D: expected 64 or 128, got 96"), std::string::npos);
  a.D = 128;
  EXPECT_EQ(msg(false), "no error");
  a.S_kv = 0;
  EXPECT_NE(msg(false).find("S_kv: expected >= 1, got 0"), std::string::npos);
  a.S_kv = 4;
  a.q_stride = a.o_stride = contiguous_bshd(3, 2, 128);
  a.k_stride = a.v_stride = contiguous_bshd(4, 2, 128);
  a.k_stride.s = 12;
  EXPECT_NE(msg(true).find("k stride over s: expected a positive multiple of 8"), std::string::npos);
  a.k_stride = a.v_stride;
  alignas(16) static char buf[64];
  a.q = a.k = a.v = buf;
  a.o = nullptr;
  EXPECT_NE(msg(true).find("o: expected a device pointer, got null"), std::string::npos);
  a.o = buf + 8;
  EXPECT_NE(msg(true).find("o: expected a 16-byte aligned pointer"), std::string::npos);
  a.o = buf;
  EXPECT_EQ(msg(true), "no error");
  EXPECT_FLOAT_EQ(effective_scale(a), 1.f / std::sqrt(128.f));
  a.scale = INFINITY;
  EXPECT_NE(msg(false).find("scale: expected a finite number"), std::string::npos);
}

TEST(AttentionCli, BadArgumentsFailBeforeTheGpu) {
  struct Case {
    const char* args;
    const char* fragment;
  } cases[] = {
      {"attn --D 96", "head dim D: expected 64 or 128, got 96"},
      {"attn --S 0", "S_q: expected >= 1, got 0"},
      {"attn --B 0", "B: expected >= 1, got 0"},
      {"attn --S-kv 0", "S_kv: expected >= 1, got 0"},
      {"attn --q /nonexistent/q.npy --k /nonexistent/k.npy --v /nonexistent/v.npy", "cannot open for reading"},
      {"attn --q /nonexistent/q.npy", "expected all three .npy files or none"},
  };
  for (const auto& c : cases) {
    const CliRun r = run_cli(c.args);
    EXPECT_EQ(r.rc, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.fragment), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << c.args << "\n" << r.out;
  }
}
