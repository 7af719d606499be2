#pragma once
// One grouped GEMM problem (MoE L1 with SwiGLU, or L2) on the GPU with its
// fp64 CPU reference, for the MoE GEMM tests: random bf16 operands (redrawn
// on the CPU from their seed), the experts' row counts, rows past the last
// expert (they belong to none), and a guard past the output. run_and_check
// poisons the output and the guard (NaN bytes), launches, and checks every
// element: each row of an expert against the reference, every other row and
// the guard still poisoned, so that a column stored past N (spilling into
// the next row, or past the tensor) or a column left out shows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "device/fill/fill_random.hpp"
#include "xstage/attention/attention.hpp"  // bf16_to_float, float_to_bf16
#include "xstage/moe/moe.hpp"

namespace xstage::gpu_tests {

struct MoeProblemShape {
  std::vector<int> counts;  // rows of each expert, in order
  int extra_rows = 0;       // rows past the last expert's end (rows_total = sum + extra_rows)
  int K = 0, N = 0;         // L1: N = 2I (interleaved W13), output I columns
};

struct MoeRunConfig {
  MoeTile tile = MoeTile::automatic;
  int splits = 0;  // 0: the heuristic's
  MoeOutStore store = MoeOutStore::automatic;
  bool caller_workspace = false;  // the split workspace from the caller (counts zeroed once), else the library's
  int tail_splits = 0;            // 0: the heuristic's

  std::string describe() const {
    return "tile " + to_string(tile) + ", splits " + std::to_string(splits) + ", tail splits " +
           std::to_string(tail_splits) + ", store " + to_string(store) + (caller_workspace ? ", caller's workspace" : "");
  }
};

class MoeGemmProblem {
 public:
  static constexpr size_t kGuard = 256;          // poisoned elements after the output
  static constexpr uint16_t kPoison = 0xffff;    // bf16 NaN: cudaMemset(0xff)
  static constexpr uint64_t kSeed = 21;          // fill streams: 0 A, 1 B

  MoeGemmProblem(MoeGemmKind kind, MoeProblemShape shape) : kind_(kind), s_(std::move(shape)) {
    E_ = int(s_.counts.size());
    n_out_ = kind_ == MoeGemmKind::l1_swiglu ? s_.N / 2 : s_.N;
    int32_t end = 0;
    for (int c : s_.counts) offs_.push_back(end += c);
    rows_in_experts_ = end;
    rows_total_ = end + s_.extra_rows;
    c_elems_ = size_t(rows_total_) * n_out_;
    ok_ = cudaMalloc(&a_, std::max<size_t>(1, size_t(rows_total_) * s_.K) * 2) == cudaSuccess &&
          cudaMalloc(&b_, size_t(E_) * s_.N * s_.K * 2) == cudaSuccess &&
          cudaMalloc(&c_, (c_elems_ + kGuard) * 2) == cudaSuccess && cudaMalloc(&offs_d_, E_ * 4) == cudaSuccess &&
          fill::launch_fill_random_bf16(a_, size_t(rows_total_) * s_.K, kSeed, 0, 0, nullptr) == 0 &&
          fill::launch_fill_random_bf16(b_, size_t(E_) * s_.N * s_.K, kSeed, 1, 0, nullptr) == 0 &&
          cudaMemcpy(offs_d_, offs_.data(), E_ * 4, cudaMemcpyHostToDevice) == cudaSuccess;
  }
  ~MoeGemmProblem() {
    cudaFree(a_), cudaFree(b_), cudaFree(c_), cudaFree(offs_d_);
  }
  MoeGemmProblem(const MoeGemmProblem&) = delete;
  MoeGemmProblem& operator=(const MoeGemmProblem&) = delete;

  int rows_total() const { return rows_total_; }

  // Two launches in a row (the second finds the split counts the first left),
  // the output poisoned before each; then every element checked.
  void run_and_check(const MoeRunConfig& cfg) {
    ASSERT_TRUE(ok_) << "allocating or filling the operands failed";
    MoeGemmArgs args{kind_, a_, b_, c_, offs_d_, nullptr, rows_total_, s_.K, s_.N, E_, cfg.tile, cfg.splits};
    args.out_store = cfg.store;
    args.tail_splits = cfg.tail_splits;
    void* ws = nullptr;
    if (cfg.caller_workspace) {
      args.workspace_bytes = moe_workspace_bytes(args);
      if (args.workspace_bytes > 0) {
        // Only the counts zeroed: the partials must not need it (NaN bytes there).
        ASSERT_EQ(cudaMalloc(&ws, args.workspace_bytes), cudaSuccess);
        ASSERT_EQ(cudaMemset(ws, 0xff, args.workspace_bytes), cudaSuccess);
        ASSERT_EQ(cudaMemset(ws, 0, moe_workspace_zeroed_bytes(args)), cudaSuccess);
        args.workspace = ws;
      }
    }
    for (int run = 0; run < 2; ++run) {
      ASSERT_EQ(cudaMemset(c_, 0xff, (c_elems_ + kGuard) * 2), cudaSuccess);
      moe_gemm(args);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cfg.describe();
    }
    if (ws != nullptr) ASSERT_EQ(cudaFree(ws), cudaSuccess);
    std::vector<uint16_t> got(c_elems_ + kGuard);
    ASSERT_EQ(cudaMemcpy(got.data(), c_, got.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    check(got, cfg);
  }

 private:
  // An operand element as the GPU holds it: the fill's value rounded to bf16
  // (the unrounded value is off by up to 2^-9 relative, which the SwiGLU's
  // product of two dot products turned into 2% differences on the first GPU
  // run of this check).
  static float operand(uint64_t stream, size_t i) {
    return bf16_to_float(float_to_bf16(fill::fill_random_value(kSeed, stream, i)));
  }

  // The fp64 reference of every row of an expert ([rows_in_experts, n_out]), once.
  void compute_reference() {
    if (!ref_.empty() || rows_in_experts_ == 0) return;
    const int K = s_.K, N = s_.N;
    ref_.resize(size_t(rows_in_experts_) * n_out_);
    std::vector<float> arow(K), bexp(size_t(N) * K);
    std::vector<double> full(N);
    double sum_sq = 0;
    for (int e = 0; e < E_; ++e) {
      const int begin = e == 0 ? 0 : offs_[e - 1];
      if (offs_[e] == begin) continue;
      for (size_t i = 0; i < bexp.size(); ++i) bexp[i] = operand(1, size_t(e) * N * K + i);
      for (int r = begin; r < offs_[e]; ++r) {
        for (int k = 0; k < K; ++k) arow[k] = operand(0, size_t(r) * K + k);
        moe_reference_row(arow.data(), bexp.data(), K, N, full.data());
        double* out = ref_.data() + size_t(r) * n_out_;
        if (kind_ == MoeGemmKind::l1_swiglu)
          moe_reference_swiglu(full.data(), n_out_, 1.0, out);
        else
          std::copy(full.begin(), full.end(), out);
        for (int n = 0; n < n_out_; ++n) sum_sq += out[n] * out[n];
      }
    }
    ref_rms_ = std::sqrt(sum_sq / double(ref_.size()));
  }

  // Element by element: an expert's row within bf16 rounding of the
  // reference (plus a little of its scale, for fp32 accumulation order);
  // rows past the last expert and the guard untouched. Reports the counts
  // and the first few of each kind.
  void check(const std::vector<uint16_t>& got, const MoeRunConfig& cfg) {
    compute_reference();
    size_t wrong = 0, touched = 0, guard = 0;
    std::string first;
    auto at = [](int r, int n) { return "row " + std::to_string(r) + " col " + std::to_string(n); };
    for (int r = 0; r < rows_total_; ++r)
      for (int n = 0; n < n_out_; ++n) {
        const uint16_t bits = got[size_t(r) * n_out_ + n];
        if (r >= rows_in_experts_) {
          if (bits != kPoison && touched++ < 3) first += "\n  " + at(r, n) + ": belongs to no expert, written";
          continue;
        }
        const double want = ref_[size_t(r) * n_out_ + n], v = bf16_to_float(bits);
        if (!(std::fabs(v - want) <= 1e-2 * std::fabs(want) + 2e-3 * ref_rms_) && wrong++ < 3)
          first += "\n  " + at(r, n) + ": got " + std::to_string(v) + ", expected " + std::to_string(want);
      }
    for (size_t i = 0; i < kGuard; ++i)
      if (got[c_elems_ + i] != kPoison && guard++ < 3) first += "\n  guard element " + std::to_string(i) + " written";
    EXPECT_EQ(wrong + touched + guard, 0u) << cfg.describe() << ": " << wrong << " wrong, " << touched
                                           << " written outside the experts' rows, " << guard
                                           << " past the output" << first;
  }

  MoeGemmKind kind_;
  MoeProblemShape s_;
  int E_ = 0, n_out_ = 0, rows_in_experts_ = 0, rows_total_ = 0;
  size_t c_elems_ = 0;
  std::vector<int32_t> offs_;
  uint16_t *a_ = nullptr, *b_ = nullptr, *c_ = nullptr;
  int32_t* offs_d_ = nullptr;
  bool ok_ = false;
  std::vector<double> ref_;
  double ref_rms_ = 0;
};

}  // namespace xstage::gpu_tests
