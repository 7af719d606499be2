#pragma once
// xstage moe-gemm's measurement: the local expert layer's grouped GEMMs
// (include/xstage/moe/moe.hpp) on GPU 0, from random inputs drawn on the GPU (the
// CPU redraws any element for the check) or from host arrays, checked against
// the fp64 CPU reference on sampled rows and timed with CUDA events.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "xstage/core/device.hpp"
#include "xstage/moe/moe.hpp"

namespace xstage {

enum class MoeBenchMode : int { l1 = 0, l2 = 1, layer = 2 };
MoeBenchMode parse_moe_bench_mode(const std::string& s);  // "l1", "l2", "layer"
std::string to_string(MoeBenchMode m);

struct MoeBenchOptions {
  MoeBenchMode mode = MoeBenchMode::layer;
  int hidden = 0, inter = 0;      // L1: K = hidden, N = 2 inter; L2: K = inter, N = hidden
  std::vector<int> counts;        // rows of each local expert (its size is E)
  bool routing_weights = false;   // scale L1's output by each row's weight
  MoeTile tile_l1 = MoeTile::automatic, tile_l2 = MoeTile::automatic;
  MoeOutStore out_store = MoeOutStore::automatic;  // both GEMMs
  int tail_splits = 0;  // both GEMMs: 0 the heuristic's, 1 none, else the cap (MoeGemmArgs::tail_splits)
  // Host inputs as float (rounded to bf16 here); all empty: random from `seed`.
  // x [rows, hidden] (l1, layer) or h [rows, inter] (l2 alone), w13 [E, 2 inter,
  // hidden] in the usual layout (gate rows, then up rows), w2 [E, hidden, inter],
  // weights [rows].
  std::vector<float> x, h, w13, w2, weights;
  uint64_t seed = 1;
  bool check = false;
  int check_rows = 0;  // rows compared per GEMM; 0: about 16, spread over up to 4 experts
  bool bench = false;
  int warmup = 3, iters = 0;  // 0: about 0.5 s worth, 5..100
  std::string out_path;       // "": none; else the output (L1's H or L2's Y) as float32 .npy
};

struct MoeGemmReport {
  MoeTile tile = MoeTile::automatic;  // as resolved
  MoeOutStore out_store = MoeOutStore::automatic;  // as resolved
  double flop = 0;
  float first_run_ms = 0;
  double median_ms = NAN, min_ms = NAN, tflops = NAN;
  double rel_err = NAN, max_abs_err = NAN;
  size_t rows_checked = 0, unwritten = 0, elements_scanned = 0;
  bool check_pass = true;
};

struct MoeBenchReport {
  DeviceInfo device;
  int E = 0, rows_total = 0;
  bool has_l1 = false, has_l2 = false;
  MoeGemmReport l1, l2;
  int iters = 0;
  double layer_median_ms = NAN, layer_tflops = NAN;  // layer mode: L1 then L2, timed together
  bool check_pass = true;
};

// CPU-only checks (before looking for a GPU).
void validate_moe_bench_options(const MoeBenchOptions& o);
// Rows per expert: `rows` each, or, with `uneven`, counts drawn from `seed`
// that sum to E * rows with some experts empty and most not a multiple of 64.
std::vector<int> moe_expert_counts(int E, int rows, bool uneven, uint64_t seed);

MoeBenchReport run_moe_bench(MoeBenchOptions o);

}  // namespace xstage
