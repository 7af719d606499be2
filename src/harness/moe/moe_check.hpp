#pragma once
// The grouped GEMMs' check against the fp64 CPU reference on sampled rows
// (internal to src/runtime): rows at both ends of a few experts and inside
// their last partial tile, plus a scan of the output for unwritten (poisoned,
// NaN) elements.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "xstage/moe/moe.hpp"

namespace xstage {

struct MoeCheckInputs {
  std::vector<int32_t> offs;  // cumulative row ends, as the kernel got them
  uint64_t seed = 1;          // which rows are sampled
  int rows = 0;               // rows to compare; 0: about 16
};

struct MoeCheckResult {
  double rel_err = 0, max_abs = 0;
  size_t rows_checked = 0, unwritten = 0, elements_scanned = 0;
  bool pass() const { return unwritten == 0 && rel_err <= 1e-2; }
};

// The experts and rows the check compares (experts with rows only).
struct MoeCheckPlan {
  std::vector<int> experts;
  std::vector<std::vector<int>> rows;  // per expert, absolute rows
};
MoeCheckPlan moe_check_plan(const std::vector<int32_t>& offs, uint64_t seed, int rows);

// a_row(row, out[K]): the GEMM's A row; b_rows(e, out[N * K]): expert e's B
// (L1: the interleaved W13). d_out: the GPU's output ([rows, N] or [rows, N / 2]).
MoeCheckResult check_moe_gemm(const MoeCheckInputs& in, MoeGemmKind kind, int K, int N, const uint16_t* d_out,
                              const std::function<void(int, float*)>& a_row,
                              const std::function<void(int, float*)>& b_rows, const float* row_weight);

}  // namespace xstage
