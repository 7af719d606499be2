// The grouped GEMMs (MoE L1 with SwiGLU, L2) against the fp64 CPU reference:
// every model shape with uneven rows per expert and empty experts, routing
// weights on and off, every tile shape forced, and through the API rows that
// belong to no expert (past the last offset) left untouched, with and without
// split-K (twice in a row: each launch must leave the tile counts at 0).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

#include "cli_runner.hpp"
#include "device/fill/fill_random.hpp"
#include "gpu/need_gpus.hpp"
#include "xstage/attention.hpp"  // bf16_to_float
#include "xstage/device.hpp"
#include "xstage/moe.hpp"

using namespace xstage;

namespace {

struct CliCase {
  const char* name;
  const char* args;
};

class MoeGemmCli : public ::testing::TestWithParam<CliCase> {};

TEST_P(MoeGemmCli, ChecksAgainstTheCpuReference) {
  XSTAGE_NEED_GPUS(1);
  const CliRun r = run_cli(std::string("moe-gemm --check --json ") + GetParam().args);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("\"check_pass\": true"), std::string::npos) << r.out;
}

// Local experts as expert parallelism over 8 (or 2) ranks leaves them; rows
// uneven around the given mean, a quarter of the experts empty.
const CliCase kCliCases[] = {
    {"deepseek_v3_ep8", "--model deepseek-v3 --ep 8 --rows-per-expert 90 --uneven --seed 3"},
    {"deepseek_v3_ep8_weights", "--model deepseek-v3 --ep 8 --rows-per-expert 200 --uneven --routing-weights --seed 4"},
    {"qwen3_235b_ep8", "--model qwen3-235b-a22b --ep 8 --rows-per-expert 150 --uneven --routing-weights --seed 5"},
    {"qwen3_30b_ep2", "--model qwen3-30b-a3b --ep 2 --rows-per-expert 70 --uneven --seed 6"},
    {"mixtral_ep8", "--model mixtral-8x7b --ep 8 --rows-per-expert 333 --routing-weights --seed 7"},
    {"hidream_ep2", "--model hidream-i1 --ep 2 --rows-per-expert 517 --uneven --seed 8"},
    {"tile_m128n256", "--model qwen3-30b-a3b --ep 8 --rows-per-expert 130 --uneven --tile-l1 m128n256 --tile-l2 m128n256"},
    {"tile_m64n256", "--model qwen3-30b-a3b --ep 8 --rows-per-expert 130 --uneven --tile-l1 m64n256 --tile-l2 m64n256 --routing-weights"},
    {"tile_m128n128", "--model qwen3-30b-a3b --ep 8 --rows-per-expert 130 --uneven --tile-l1 m128n128 --tile-l2 m128n128"},
    // Few experts on long K at 64-130 rows: the heuristic splits K.
    {"mixtral_ep8_split_k", "--model mixtral-8x7b --ep 8 --rows-per-expert 130 --routing-weights --seed 11"},
    {"hidream_ep2_split_k", "--model hidream-i1 --ep 2 --rows-per-expert 64 --uneven --seed 12"},
    {"small_counts", "--hidden 384 --inter 192 --counts 1,0,65,127,0,3 --routing-weights --seed 9"},
    {"one_row", "--hidden 256 --inter 128 --counts 0,1 --seed 10"},
};
INSTANTIATE_TEST_SUITE_P(Shapes, MoeGemmCli, ::testing::ValuesIn(kCliCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Rows past the last expert's end belong to no expert: the kernel computes
// them inside its last tile but must not store them.
void rows_past_the_last_expert_stay_untouched(MoeGemmKind kind, MoeTile tile, int splits = 1) {
  const int E = 3, rows_total = 100, K = 136, N = 256;  // K: two k-blocks, the second ragged
  const std::vector<int32_t> offs = {0, 70, 70};
  const int n_out = kind == MoeGemmKind::l1_swiglu ? N / 2 : N;
  uint16_t *a, *b, *c;
  int32_t* d_offs;
  ASSERT_EQ(cudaMalloc(&a, size_t(rows_total) * K * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, size_t(E) * N * K * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&c, size_t(rows_total) * n_out * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_offs, E * 4), cudaSuccess);
  ASSERT_EQ(fill::launch_fill_random_bf16(a, size_t(rows_total) * K, 21, 0, 0, nullptr), 0);
  ASSERT_EQ(fill::launch_fill_random_bf16(b, size_t(E) * N * K, 21, 1, 0, nullptr), 0);
  ASSERT_EQ(cudaMemset(c, 0xff, size_t(rows_total) * n_out * 2), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_offs, offs.data(), E * 4, cudaMemcpyHostToDevice), cudaSuccess);
  for (int run = 0; run < 2; ++run) {  // the second run finds the split counts the first left
    ASSERT_EQ(cudaMemset(c, 0xff, size_t(rows_total) * n_out * 2), cudaSuccess);
    moe_gemm({kind, a, b, c, d_offs, nullptr, rows_total, K, N, E, tile, splits});
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  std::vector<uint16_t> got(size_t(rows_total) * n_out);
  ASSERT_EQ(cudaMemcpy(got.data(), c, got.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<float> arow(K), bexp(size_t(N) * K);
  std::vector<double> full(N), ref(n_out);
  for (size_t i = 0; i < bexp.size(); ++i) bexp[i] = fill::fill_random_value(21, 1, size_t(1) * N * K + i);  // expert 1
  double num = 0, den = 0;
  for (int r = 0; r < rows_total; ++r) {
    if (r >= 70) {
      for (int n = 0; n < n_out; ++n)
        ASSERT_TRUE(std::isnan(bf16_to_float(got[size_t(r) * n_out + n])))
            << "row " << r << " col " << n << " splits " << splits;
      continue;
    }
    for (int k = 0; k < K; ++k) arow[k] = fill::fill_random_value(21, 0, size_t(r) * K + k);
    moe_reference_row(arow.data(), bexp.data(), K, N, full.data());
    if (kind == MoeGemmKind::l1_swiglu)
      moe_reference_swiglu(full.data(), n_out, 1.0, ref.data());
    else
      ref = full;
    for (int n = 0; n < n_out; ++n) {
      const float v = bf16_to_float(got[size_t(r) * n_out + n]);
      ASSERT_FALSE(std::isnan(v)) << "row " << r << " col " << n << " unwritten, splits " << splits;
      const double d = v - ref[n];
      num += d * d, den += ref[n] * ref[n];
    }
  }
  EXPECT_LT(std::sqrt(num / den), 1e-2) << "splits " << splits;
  cudaFree(a), cudaFree(b), cudaFree(c), cudaFree(d_offs);
}

TEST(MoeGemmApi, RowsPastTheLastExpertStayUntouchedL1) {
  XSTAGE_NEED_GPUS(1);
  for (MoeTile t : {MoeTile::m128n256, MoeTile::m64n256, MoeTile::m128n128})
    rows_past_the_last_expert_stay_untouched(MoeGemmKind::l1_swiglu, t);
}

TEST(MoeGemmApi, RowsPastTheLastExpertStayUntouchedL2) {
  XSTAGE_NEED_GPUS(1);
  for (MoeTile t : {MoeTile::m128n256, MoeTile::m64n256, MoeTile::m128n128})
    rows_past_the_last_expert_stay_untouched(MoeGemmKind::l2, t);
}

// Split-K: K = 136 is three k-blocks, the last ragged; 2 and 3 ranges.
TEST(MoeGemmApi, SplitKL1) {
  XSTAGE_NEED_GPUS(1);
  for (MoeTile t : {MoeTile::m128n256, MoeTile::m64n256, MoeTile::m128n128})
    for (int splits : {2, 3}) rows_past_the_last_expert_stay_untouched(MoeGemmKind::l1_swiglu, t, splits);
}

TEST(MoeGemmApi, SplitKL2) {
  XSTAGE_NEED_GPUS(1);
  for (MoeTile t : {MoeTile::m128n256, MoeTile::m64n256, MoeTile::m128n128})
    for (int splits : {2, 3}) rows_past_the_last_expert_stay_untouched(MoeGemmKind::l2, t, splits);
}

}  // namespace
