#pragma once
// xstage attn's measurement: one attention forward (include/xstage/attention/attention.hpp)
// on GPU 0 from host inputs, checked against the fp64 CPU reference on a
// subset of rows and timed with CUDA events.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "xstage/attention/attention.hpp"
#include "xstage/core/device.hpp"

namespace xstage {

struct AttentionBenchOptions {
  // B, H, S_q, S_kv, D, scale and kernel; the pointers and strides are the bench's own.
  AttentionForwardArgs shape;
  // Inputs as float [B, S, H, D] (rounded to bf16 here, so the reference sees
  // what the kernel sees); all three empty: random from `seed`.
  std::vector<float> q, k, v;
  uint64_t seed = 1;
  bool check = false;   // compare with the fp64 CPU reference
  int check_rows = 0;   // rows compared; 0: all, or as many as ~2 GFLOP of reference allow
  bool bench = false;   // median of timed runs after warm-up
  int warmup = 5;
  int iters = 0;        // 0: about 0.5 s worth, 5..100
  std::string o_path;   // "": none; else O as float32 .npy [B, S, H, D]
};

struct AttentionBenchReport {
  DeviceInfo device;
  float scale = 0;        // the scale the kernel used
  double flop = 0;        // of one forward
  float first_run_ms = 0;  // the first run, on poisoned output, with the log-sum-exp
  // bench: the runs timed (without the log-sum-exp, as a forward pass without backward runs)
  int iters = 0;
  double median_ms = NAN, min_ms = NAN, tflops = NAN;
  // check: every element written (no NaN left), errors on the rows checked
  double rel_err = NAN, max_abs_err = NAN, lse_max_abs_err = NAN;
  size_t unwritten = 0, rows_checked = 0, rows_total = 0;
  bool check_pass = true;  // rel_err <= 1e-2 and nothing unwritten (true without a check)
};

// CPU-only checks of the counts (before looking for a GPU); the shape is
// validate_attention_args' job.
void validate_attention_bench_options(const AttentionBenchOptions& o);

// Throws xstage::Error when there is no GPU or CUDA fails; a failed check is
// in the report (check_pass), so that the caller can show the errors first.
AttentionBenchReport run_attention_bench(AttentionBenchOptions o);

}  // namespace xstage
