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
#include "gpu/moe_gemm_problem.hpp"
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
                                   "--tile-l2 m64n80"},  // 64 tiles, no split (tail_split_k splits this tile)
    {"narrow_hidream_ep2_auto", "--model hidream-i1 --ep 2 --rows-per-expert 128 --seed 24"},
    {"narrow_small_counts", "--hidden 640 --inter 192 --counts 1,0,65,127,0,3 --seed 25 --tile-l2 m64n80"},
    // Shapes no tile width divides (N a multiple of 16, K of 8), every output store: hidden 2880 (L2's N: 11
    // 256-column n-blocks and 64 columns; L1's K: 45 k-blocks) and inter 1400 (L1's N = 2800; L2's K: 21
    // k-blocks and 56 columns); K shorter than a k-block; split-K on a ragged K; the 64 x 80 tile's partial
    // n-block; 300 experts of a few rows.
    {"tail_hidden2880_inter1400", "--hidden 2880 --inter 1400 --counts 0,61,1,38,200,3 --routing-weights --seed 30"},
    {"tail_hidden2880_inter1400_staged", "--hidden 2880 --inter 1400 --counts 0,61,1,38,200,3 --seed 31 "
                                         "--out-store staged"},
    {"tail_hidden2880_inter1400_bulk", "--hidden 2880 --inter 1400 --counts 0,61,1,38,200,3 --seed 32 "
                                       "--out-store bulk"},
    {"tail_hidden2880_inter1400_tma", "--hidden 2880 --inter 1400 --counts 0,61,1,38,200,3 --routing-weights "
                                      "--seed 33 --out-store tma"},
    {"tail_short_k", "--hidden 48 --inter 24 --counts 1,0,65,127,0,3 --routing-weights --seed 34"},
    {"tail_short_k_bulk", "--hidden 48 --inter 24 --counts 1,0,65,127,0,3 --seed 35 --out-store bulk"},
    {"tail_short_k_tma", "--hidden 48 --inter 24 --counts 1,0,65,127,0,3 --seed 36 --out-store tma"},
    {"tail_split_k", "--hidden 272 --inter 6152 --counts 70,1 --seed 37"},  // L2: 8 tiles of 64 x 80, 4 splits
    {"tail_split_k_tma", "--hidden 272 --inter 6152 --counts 70,1 --seed 38 --out-store tma --tile-l2 m128n256"},  // 4 splits
    {"tail_narrow", "--hidden 272 --inter 136 --counts 1,0,65,127,0,3 --seed 39 --tile-l2 m64n80"},
    {"tail_many_experts", "--hidden 80 --inter 40 --experts 300 --rows-per-expert 3 --uneven --seed 40"},
    {"tail_one_expert", "--hidden 16 --inter 8 --counts 333 --seed 41"},
    // The ping-pong tile (each consumer warpgroup on every other tile of its CTA, turn about): both GEMMs,
    // ragged experts, routing weights, partial n-blocks and k-blocks, K shorter than a k-block, an expert of
    // one row beside empty ones, and enough tiles that every CTA hands the turn over many times (odd counts
    // a CTA included: ~800 tiles on the SMs).
    {"pingpong_qwen3_ep8", "--model qwen3-30b-a3b --ep 8 --rows-per-expert 130 --uneven --routing-weights "
                           "--seed 42 --tile-l1 m128n128pp --tile-l2 m128n128pp"},
    {"pingpong_tail_hidden2880_inter1400", "--hidden 2880 --inter 1400 --counts 0,61,1,38,200,3 --routing-weights "
                                           "--seed 43 --tile-l1 m128n128pp --tile-l2 m128n128pp"},
    {"pingpong_short_k", "--hidden 48 --inter 24 --counts 1,0,65,127,0,3 --seed 44 --tile-l1 m128n128pp "
                         "--tile-l2 m128n128pp"},
    {"pingpong_many_tiles", "--hidden 1040 --inter 264 --experts 37 --rows-per-expert 300 --uneven --seed 45 "
                            "--routing-weights --tile-l1 m128n128pp --tile-l2 m128n128pp"},
    {"pingpong_one_expert", "--hidden 16 --inter 8 --counts 333 --seed 46 --tile-l1 m128n128pp "
                            "--tile-l2 m128n128pp"},
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
// them inside its last tile but must not store them (moe_gemm_problem.hpp
// checks every element: the experts' rows against the reference, the others
// still poisoned). Experts 0 and 2 are empty; K = 136: three k-blocks, the
// last ragged. workspace: split-K's partials and counts from the caller
// (zeroed once here), else the library's.
void rows_past_the_last_expert_stay_untouched(MoeGemmKind kind, MoeTile tile, int splits, MoeOutStore store,
                                              bool caller_workspace = false, int N = 256) {
  gpu_tests::MoeGemmProblem problem(kind, {{0, 70, 0}, 30, 136, N});
  problem.run_and_check({tile, splits, store, caller_workspace});
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
