// The fused MoE expert layer kernel alone (no dispatch, no combine), against
// the two grouped GEMMs it fuses, on GPU 0: every L2 row stored locally
// (compute only), to device buffers, or to pinned host memory mapped into the
// GPU (the emulated ranks' PCIe X-Stage), under each schedule. Rows per
// expert uniform; each row's destination slot a permutation.
//   build/bench_fused_layer --benchmark_filter=... (times: CUDA events, manual)
// Arguments: hidden, inter, experts, rows per expert, destination (0 local,
// 1 device, 2 host), schedule (0 expert-wave, 1 share), share x 1000 (0: even), lag tiles (-1: grid).
#include <benchmark/benchmark.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <tuple>
#include <random>
#include <stdexcept>
#include <vector>

#include "device/fill/fill_random.hpp"
#include "device/moe/fused_layer_launch.hpp"
#include "xstage/moe/moe.hpp"

namespace {
namespace moe = xstage::moe;
namespace fill = xstage::fill;

void ck(cudaError_t e) {
  if (e != cudaSuccess) throw std::runtime_error(cudaGetErrorString(e));
}
void ck(int e) { ck(cudaError_t(e)); }

struct Problem {
  int H, I, E, rows, total;
  uint16_t *x, *w13, *w2, *h, *out, *comb_dev;
  void* comb_host;
  int32_t *offs, *rank, *slot, *counters;
  float* weight;
  void** comb_table_dev;
  void** comb_table_host;
  xstage::remote::FlagTimeoutRecord* record;
  Problem(int H_, int I_, int E_, int rows_) : H(H_), I(I_), E(E_), rows(rows_), total(E_ * rows_) {
    const size_t n = size_t(total);
    ck(cudaMalloc(&x, n * H * 2));
    ck(cudaMalloc(&w13, size_t(E) * 2 * I * H * 2));
    ck(cudaMalloc(&w2, size_t(E) * H * I * 2));
    ck(cudaMalloc(&h, n * I * 2));
    ck(cudaMalloc(&out, n * H * 2));
    ck(cudaMalloc(&comb_dev, n * H * 2));
    ck(cudaHostAlloc(&comb_host, n * H * 2, cudaHostAllocMapped));
    ck(cudaMalloc(&offs, E * 4));
    ck(cudaMalloc(&rank, n * 4));
    ck(cudaMalloc(&slot, n * 4));
    ck(cudaMalloc(&weight, n * 4));
    ck(cudaMalloc(&counters, moe::fused_layer_counter_ints(E, total) * 4));
    ck(cudaMemset(counters, 0, moe::fused_layer_counter_ints(E, total) * 4));
    ck(cudaMalloc(&record, sizeof(xstage::remote::FlagTimeoutRecord)));
    ck(cudaMemset(record, 0, sizeof(xstage::remote::FlagTimeoutRecord)));
    ck(fill::launch_fill_random_bf16(x, n * H, 1, 0, 0, nullptr));
    ck(fill::launch_fill_random_bf16(w13, size_t(E) * 2 * I * H, 1, 1, 0, nullptr));
    ck(fill::launch_fill_random_bf16(w2, size_t(E) * H * I, 1, 2, 0, nullptr));
    std::vector<int32_t> o(E), r(n, 0), s(n);
    for (int e = 0; e < E; ++e) o[e] = (e + 1) * rows;
    std::iota(s.begin(), s.end(), 0);
    std::shuffle(s.begin(), s.end(), std::mt19937(3));
    std::vector<float> w(n, 0.5f);
    ck(cudaMemcpy(offs, o.data(), E * 4, cudaMemcpyHostToDevice));
    ck(cudaMemcpy(rank, r.data(), n * 4, cudaMemcpyHostToDevice));
    ck(cudaMemcpy(slot, s.data(), n * 4, cudaMemcpyHostToDevice));
    ck(cudaMemcpy(weight, w.data(), n * 4, cudaMemcpyHostToDevice));
    void* host_dev_ptr = nullptr;
    ck(cudaHostGetDevicePointer(&host_dev_ptr, comb_host, 0));
    ck(cudaMalloc(&comb_table_dev, sizeof(void*)));
    ck(cudaMalloc(&comb_table_host, sizeof(void*)));
    void* d = comb_dev;
    ck(cudaMemcpy(comb_table_dev, &d, sizeof(void*), cudaMemcpyHostToDevice));
    ck(cudaMemcpy(comb_table_host, &host_dev_ptr, sizeof(void*), cudaMemcpyHostToDevice));
  }
  ~Problem() {
    for (void* p : {(void*)x, (void*)w13, (void*)w2, (void*)h, (void*)out, (void*)comb_dev, (void*)offs, (void*)rank,
                    (void*)slot, (void*)weight, (void*)counters, (void*)comb_table_dev, (void*)comb_table_host,
                    (void*)record})
      cudaFree(p);
    cudaFreeHost(comb_host);
  }
};

int tile_for(int rows) { return rows <= 64 ? moe::kFusedM64N256 : moe::kFusedM128N256; }

template <class F>
void time_loop(benchmark::State& state, F&& run) {
  cudaEvent_t a, b;
  ck(cudaEventCreate(&a));
  ck(cudaEventCreate(&b));
  run();
  ck(cudaDeviceSynchronize());
  for (auto _ : state) {
    ck(cudaEventRecord(a));
    run();
    ck(cudaEventRecord(b));
    ck(cudaEventSynchronize(b));
    float ms = 0;
    ck(cudaEventElapsedTime(&ms, a, b));
    state.SetIterationTime(ms / 1e3);
  }
  cudaEventDestroy(a), cudaEventDestroy(b);
}

void BM_GroupedPair(benchmark::State& state) {
  Problem pr(int(state.range(0)), int(state.range(1)), int(state.range(2)), int(state.range(3)));
  const xstage::MoeTile t = tile_for(pr.rows) == moe::kFusedM64N256 ? xstage::MoeTile::m64n256 : xstage::MoeTile::m128n256;
  xstage::MoeGemmArgs l1{xstage::MoeGemmKind::l1_swiglu, pr.x, pr.w13, pr.h, pr.offs, pr.weight, pr.total, pr.H,
                         2 * pr.I, pr.E, t, 1};
  xstage::MoeGemmArgs l2{xstage::MoeGemmKind::l2, pr.h, pr.w2, pr.out, pr.offs, nullptr, pr.total, pr.I, pr.H, pr.E,
                         t, 1};
  time_loop(state, [&] {
    xstage::moe_gemm(l1);
    xstage::moe_gemm(l2);
  });
}

void BM_Fused(benchmark::State& state) {
  Problem pr(int(state.range(0)), int(state.range(1)), int(state.range(2)), int(state.range(3)));
  moe::FusedLayerParams p;
  p.x_pool = pr.x, p.h = pr.h, p.w13 = pr.w13, p.w2 = pr.w2, p.offs = pr.offs, p.row_weight = pr.weight;
  p.row_dest_rank = pr.rank, p.row_dest_slot = pr.slot;
  p.rows_cap = pr.total, p.hidden = pr.H, p.inter = pr.I, p.E_run = pr.E;
  const int dest = int(state.range(4));
  p.out_pool = dest == 0 ? pr.out : nullptr;
  p.combine = dest == 1 ? pr.comb_table_dev : dest == 2 ? pr.comb_table_host : nullptr;
  p.schedule = int(state.range(5));
  p.l2_share = float(state.range(6)) / 1000.f;
  int sms = 0;
  ck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  p.lag_tiles = state.range(7) < 0 ? sms : int(state.range(7));
  p.counters = pr.counters, p.timeout_record = pr.record;
  const int tile = tile_for(pr.rows);
  time_loop(state, [&] { ck(moe::launch_fused_layer(p, tile, nullptr)); });
}

// DeepSeek-V3 at P = 2 (all 256 experts in one launch, as emulated ranks run),
// Qwen3-30B, Mixtral; rows per expert 128 .. 1024.
void shapes(benchmark::internal::Benchmark* b, bool fused) {
  const std::vector<std::vector<int64_t>> base = {
      {7168, 2048, 256, 128}, {7168, 2048, 256, 512}, {2048, 768, 128, 256}, {2048, 768, 128, 1024},
      {4096, 14336, 8, 1024}, {4096, 14336, 8, 4096}};
  for (auto a : base) {
    if (!fused) {
      b->Args(a);
      continue;
    }
    for (int dest : {0, 1, 2})
      for (auto [sch, share, lag] : std::vector<std::tuple<int, int, int>>{{0, 0, 0}, {1, 0, -1}, {1, 0, 0}}) {
        if (dest != 2 && (sch != 0 || lag != 0)) continue;  // schedules matter where stores stall
        auto v = a;
        v.insert(v.end(), {dest, sch, share, lag});
        b->Args(v);
      }
  }
}

BENCHMARK(BM_GroupedPair)->Apply([](auto* b) { shapes(b, false); })->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Fused)->Apply([](auto* b) { shapes(b, true); })->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
