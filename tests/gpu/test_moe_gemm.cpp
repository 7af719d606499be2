// The grouped GEMMs (MoE L1 with SwiGLU, L2) against the fp64 CPU reference:
// every model shape with uneven rows per expert and empty experts, routing
// weights on and off, every tile shape forced, and through the API rows that
// belong to no expert (past the last offset) left untouched, with and without
// split-K (twice in a row: each launch must leave the tile counts at 0), with
// every output store (warp-staged 16-byte stores, whole-tile bulk copies, warp
// boxes as TMA tensor stores) and
// split-K's workspace from the library or from the caller.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "device/fill/fill_random.hpp"
#include "gpu/need_gpus.hpp"
#include "xstage/attention/attention.hpp"  // bf16_to_float
#include "xstage/core/device.hpp"
#include "xstage/moe/moe.hpp"

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
    // The whole-tile bulk-copy output store on the same kinds of cases.
    {"bulk_deepseek_v3_ep8_weights",
     "--model deepseek-v3 --ep 8 --rows-per-expert 200 --uneven --routing-weights --seed 14 --out-store bulk"},
    {"bulk_tile_m64n256", "--model qwen3-30b-a3b --ep 8 --rows-per-expert 130 --uneven --tile-l1 m64n256 "
                          "--tile-l2 m64n256 --routing-weights --out-store bulk"},
    {"bulk_tile_m128n128", "--model qwen3-30b-a3b --ep 8 --rows-per-expert 130 --uneven --tile-l1 m128n128 "
                           "--tile-l2 m128n128 --out-store bulk"},
    {"bulk_mixtral_ep8_split_k", "--model mixtral-8x7b --ep 8 --rows-per-expert 130 --routing-weights --seed 15 "
                                 "--out-store bulk"},
    {"bulk_small_counts", "--hidden 384 --inter 192 --counts 1,0,65,127,0,3 --routing-weights --seed 16 --out-store bulk"},
    {"staged_hidream_ep2", "--model hidream-i1 --ep 2 --rows-per-expert 517 --uneven --seed 17 --out-store staged"},
    // Warp boxes as TMA tensor stores: ragged experts (warps whose rows cross an expert's end store themselves),
    // every tile, split-K, a row or two an expert.
    {"tma_deepseek_v3_ep8_weights",
     "--model deepseek-v3 --ep 8 --rows-per-expert 200 --uneven --routing-weights --seed 18 --out-store tma"},
    {"tma_tile_m64n256", "--model qwen3-30b-a3b --ep 8 --rows-per-expert 130 --uneven --tile-l1 m64n256 "
                         "--tile-l2 m64n256 --routing-weights --out-store tma"},
    {"tma_tile_m128n128", "--model qwen3-30b-a3b --ep 8 --rows-per-expert 130 --uneven --tile-l1 m128n128 "
                          "--tile-l2 m128n128 --out-store tma"},
    {"tma_mixtral_ep8_split_k", "--model mixtral-8x7b --ep 8 --rows-per-expert 130 --routing-weights --seed 19 "
                                "--out-store tma"},
    {"tma_small_counts", "--hidden 384 --inter 192 --counts 1,0,65,127,0,3 --routing-weights --seed 20 --out-store tma"},
    {"tma_hidream_ep2", "--model hidream-i1 --ep 2 --rows-per-expert 517 --uneven --seed 21 --out-store tma"},
    // The 64 x 80 L2 tile (warpgroup halves of 40 columns: the staged store's narrow rest), ragged experts,
    // routing weights in L1, with and without split-K; and where the heuristic picks it (HiDream P = 2, 128 rows).
    {"narrow_hidream_ep2", "--model hidream-i1 --ep 2 --rows-per-expert 130 --uneven --routing-weights --seed 22 "
                           "--tile-l2 m64n80"},
    {"narrow_hidream_ep2_split_k", "--model hidream-i1 --ep 2 --rows-per-expert 40 --uneven --seed 23 "
                                   "--tile-l2 m64n80"},  // 64 tiles: 2 splits
    {"narrow_hidream_ep2_auto", "--model hidream-i1 --ep 2 --rows-per-expert 128 --seed 24"},
    {"narrow_small_counts", "--hidden 640 --inter 192 --counts 1,0,65,127,0,3 --seed 25 --tile-l2 m64n80"},
};
INSTANTIATE_TEST_SUITE_P(Shapes, MoeGemmCli, ::testing::ValuesIn(kCliCases),
                         [](const auto& info) { return std::string(info.param.name); });

// The automatic choices as the runs report them: the 64 x 80 tile (staged)
// for HiDream P = 2 L2 at 128 rows an expert (2 x 2 x 32 = 128 tiles where
// 128 x 128 leaves 92 of the H200's 132 SMs idle), the tma store for L2 on
// 128 x 256 tiles, staged for L1.
TEST(MoeGemmCliAuto, TheHeuristicsChoicesAreTheOnesRun) {
  XSTAGE_NEED_GPUS(1);
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  const CliRun r = run_cli("moe-gemm --check --json --model hidream-i1 --ep 2 --rows-per-expert 128 --seed 26");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["check_pass"], true);
  EXPECT_EQ(j["l1"]["out_store"], "staged");
  if (sms >= 128) {  // the 128 narrow tiles fit one wave
    EXPECT_EQ(j["l2"]["tile"], "m64n80") << sms << " SMs";
    EXPECT_EQ(j["l2"]["out_store"], "staged");
  }
  const CliRun q = run_cli("moe-gemm --check --json --model qwen3-30b-a3b --ep 2 --rows-per-expert 256 --seed 27");
  ASSERT_EQ(q.rc, 0) << q.out;
  const auto k = nlohmann::json::parse(q.out.substr(q.out.find('{')));
  EXPECT_EQ(k["l2"]["tile"], "m128n256");
  EXPECT_EQ(k["l2"]["out_store"], "tma");
  EXPECT_EQ(k["check_pass"], true);
}

// Rows past the last expert's end belong to no expert: the kernel computes
// them inside its last tile but must not store them.
// workspace: split-K's partials and counts from the caller (zeroed once here), else the library's.
void rows_past_the_last_expert_stay_untouched(MoeGemmKind kind, MoeTile tile, int splits, MoeOutStore store,
                                              bool caller_workspace = false, int N = 256) {
  const int E = 3, rows_total = 100, K = 136;  // K: three k-blocks, the last ragged
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
  MoeGemmArgs args{kind, a, b, c, d_offs, nullptr, rows_total, K, N, E, tile, splits};
  args.out_store = store;
  void* ws = nullptr;
  if (caller_workspace) {
    args.workspace_bytes = moe_workspace_bytes(args);
    ASSERT_GT(args.workspace_bytes, 0u);
    ASSERT_EQ(cudaMalloc(&ws, args.workspace_bytes), cudaSuccess);
    ASSERT_EQ(cudaMemset(ws, 0, args.workspace_bytes), cudaSuccess);
    args.workspace = ws;
  }
  for (int run = 0; run < 2; ++run) {  // the second run finds the split counts the first left
    ASSERT_EQ(cudaMemset(c, 0xff, size_t(rows_total) * n_out * 2), cudaSuccess);
    moe_gemm(args);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  if (ws != nullptr) ASSERT_EQ(cudaFree(ws), cudaSuccess);
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

constexpr MoeTile kTiles[] = {MoeTile::m128n256, MoeTile::m64n256, MoeTile::m128n128};
constexpr MoeOutStore kStores[] = {MoeOutStore::warp_staged, MoeOutStore::tile_bulk, MoeOutStore::warp_tma};

TEST(MoeGemmApi, RowsPastTheLastExpertStayUntouchedL1) {
  XSTAGE_NEED_GPUS(1);
  for (MoeOutStore st : kStores)
    for (MoeTile t : kTiles) rows_past_the_last_expert_stay_untouched(MoeGemmKind::l1_swiglu, t, 1, st);
}

TEST(MoeGemmApi, RowsPastTheLastExpertStayUntouchedL2) {
  XSTAGE_NEED_GPUS(1);
  for (MoeOutStore st : kStores)
    for (MoeTile t : kTiles) rows_past_the_last_expert_stay_untouched(MoeGemmKind::l2, t, 1, st);
}

// The 64 x 80 tile (L2, staged store): N = 640, a multiple of 80 and of 128,
// without and with split-K, the library's workspace and the caller's.
TEST(MoeGemmApi, NarrowTileL2) {
  XSTAGE_NEED_GPUS(1);
  for (int splits : {1, 2, 3})
    rows_past_the_last_expert_stay_untouched(MoeGemmKind::l2, MoeTile::m64n80, splits, MoeOutStore::warp_staged,
                                             false, 640);
  rows_past_the_last_expert_stay_untouched(MoeGemmKind::l2, MoeTile::m64n80, 3, MoeOutStore::automatic, true, 640);
}

// Split-K: K = 136 is three k-blocks, the last ragged; 2 and 3 ranges.
TEST(MoeGemmApi, SplitKL1) {
  XSTAGE_NEED_GPUS(1);
  for (MoeOutStore st : kStores)
    for (MoeTile t : kTiles)
      for (int splits : {2, 3}) rows_past_the_last_expert_stay_untouched(MoeGemmKind::l1_swiglu, t, splits, st);
}

TEST(MoeGemmApi, SplitKL2) {
  XSTAGE_NEED_GPUS(1);
  for (MoeOutStore st : kStores)
    for (MoeTile t : kTiles)
      for (int splits : {2, 3}) rows_past_the_last_expert_stay_untouched(MoeGemmKind::l2, t, splits, st);
}

// The caller's workspace, as a CUDA graph or a framework's allocator needs.
TEST(MoeGemmApi, SplitKWithTheCallersWorkspace) {
  XSTAGE_NEED_GPUS(1);
  for (MoeGemmKind kind : {MoeGemmKind::l1_swiglu, MoeGemmKind::l2})
    for (MoeTile t : kTiles) rows_past_the_last_expert_stay_untouched(kind, t, 3, MoeOutStore::tile_bulk, true);
}

// Split-K launches captured in a CUDA graph and replayed: with the caller's
// workspace nothing is allocated during capture, and every replay leaves the
// tile counts at 0 for the next.
TEST(MoeGemmApi, SplitKInACudaGraph) {
  XSTAGE_NEED_GPUS(1);
  const int E = 2, rows_total = 96, K = 512, N = 256;
  const std::vector<int32_t> offs = {40, 96};
  uint16_t *a, *b, *c1, *c2;
  int32_t* d_offs;
  ASSERT_EQ(cudaMalloc(&a, size_t(rows_total) * K * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, size_t(E) * N * K * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&c1, size_t(rows_total) * N * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&c2, size_t(rows_total) * N * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_offs, E * 4), cudaSuccess);
  ASSERT_EQ(fill::launch_fill_random_bf16(a, size_t(rows_total) * K, 31, 0, 0, nullptr), 0);
  ASSERT_EQ(fill::launch_fill_random_bf16(b, size_t(E) * N * K, 31, 1, 0, nullptr), 0);
  ASSERT_EQ(cudaMemcpy(d_offs, offs.data(), E * 4, cudaMemcpyHostToDevice), cudaSuccess);
  MoeGemmArgs args{MoeGemmKind::l2, a, b, c1, d_offs, nullptr, rows_total, K, N, E, MoeTile::m128n128, 4};
  moe_gemm(args);  // the reference: one split-K launch outside the graph, the library's workspace
  void* ws = nullptr;
  args.c = c2, args.workspace_bytes = moe_workspace_bytes(args);
  ASSERT_EQ(cudaMalloc(&ws, args.workspace_bytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(ws, 0, args.workspace_bytes), cudaSuccess);
  args.workspace = ws;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  moe_gemm(args, s);
  moe_gemm(args, s);
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
  for (int replay = 0; replay < 3; ++replay) {
    ASSERT_EQ(cudaMemsetAsync(c2, 0xff, size_t(rows_total) * N * 2, s), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    std::vector<uint16_t> want(size_t(rows_total) * N), got(want.size());
    ASSERT_EQ(cudaMemcpy(want.data(), c1, want.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), c2, got.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    // The partials are summed in split order whoever finishes last: the same bits.
    ASSERT_EQ(want, got) << "replay " << replay;
  }
  cudaGraphExecDestroy(ge), cudaGraphDestroy(g), cudaStreamDestroy(s);
  cudaFree(ws), cudaFree(a), cudaFree(b), cudaFree(c1), cudaFree(c2), cudaFree(d_offs);
}

}  // namespace
