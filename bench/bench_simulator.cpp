// The X-Stage simulator's speed: a million bursts should take well under a
// second on one core. Run: build/bench_simulator
#include <benchmark/benchmark.h>

#include "xstage/model/model.hpp"
#include "xstage/model/simulator.hpp"

namespace {

xstage::StageConfig stage() {
  xstage::StageConfig c;
  c.R_Bps = 52e9;
  c.Q_bytes = 32e6;
  c.issue = {200, 55e9, 7e12};
  return c;
}

// K producers in lock step, bursts per producer chosen so that K * bursts = total.
void BM_PeriodicBursts(benchmark::State& state) {
  const int K = static_cast<int>(state.range(0));
  const long total = state.range(1);
  const auto progs = xstage::periodic_programs(K, 4e6, 40e3, total / K);
  for (auto _ : state) {
    auto r = xstage::simulate(stage(), progs);
    benchmark::DoNotOptimize(r.total_ns);
  }
  state.SetItemsProcessed(state.iterations() * total);
}
BENCHMARK(BM_PeriodicBursts)->Args({132, 1'000'000})->Args({8, 1'000'000})->Args({1, 1'000'000})
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
