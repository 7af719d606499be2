// What a run of the MoE layer leaves to read: the waits that timed out and
// bad routing input (check_waits), rows per expert, the fused kernel's
// per-tile trace, phase times.
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "runtime/moe/moe_layer_impl.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"

namespace xstage {

namespace {

std::string describe_wait(int P, int wait, const remote::FlagTimeoutRecord& r, int rank0, int n) {
  const std::string values = fmt::format("for {} ns: expected >= {}, saw {} (block {}, thread {})", r.waited_ns,
                                         r.expected, r.seen, r.block, r.thread);
  switch (wait) {
    case kWaitPull:
      return fmt::format(
          "MoE layer: dispatch wait timed out: rank {} waited on flag {} (the counts of source {}) {}; "
          "that source's route kernel never published them (not started, or stuck)",
          r.rank, r.flag, r.flag - moe::layer_flag_counts(0), values);
    case kWaitExperts:
      return r.rank == -2 ? fmt::format("MoE layer: the fused expert kernel of ranks {} .. {} timed out: an L1 tile of "
                                        "the launch's expert {} waited for a block of its pool rows copied from "
                                        "the sources' send buffers {}",
                                        rank0, rank0 + n - 1, r.flag, values)
                          : fmt::format("MoE layer: the fused expert kernel of ranks {} .. {} timed out: an L2 tile of "
                                        "the launch's expert {} waited for that expert's L1 tiles done {}",
                                        rank0, rank0 + n - 1, r.flag, values);
    default:
      return fmt::format(
          "MoE layer: combine wait timed out: rank {} waited on flag {} (the expert rows of rank {}) {}; "
          "that rank's fused expert kernel never finished",
          r.rank, r.flag, r.flag - moe::layer_flag_done(P, 0), values);
  }
}

std::string describe_input(const moe::RouteInputError& e, int E) {
  if (e.kind == moe::kRouteIdOutOfRange)
    return fmt::format(
        "MoE layer: rank {}, token {}, slot {}: topk id {} is outside 0 .. {} (E - 1); the pair was "
        "left out",
        e.rank, e.token, e.slot, e.id, E - 1);
  return fmt::format(
      "MoE layer: rank {}, token {}, slot {}: topk id {} repeats an earlier slot's expert (a token's k "
      "experts must be distinct); the repeat was left out",
      e.rank, e.token, e.slot, e.id);
}

}  // namespace

void MoeLayer::check_waits() {
  Impl& m = *impl_;
  std::string bad;
  for (Impl::Group& g : m.groups) {
    XSTAGE_CUDA(cudaSetDevice(g.device));
    XSTAGE_CUDA(cudaStreamSynchronize(g.stream));
    remote::FlagTimeoutRecord rec[kWaitCount];
    moe::RouteInputError input;
    XSTAGE_CUDA(cudaMemcpy(rec, g.records, sizeof rec, cudaMemcpyDeviceToHost));
    XSTAGE_CUDA(cudaMemcpy(&input, g.input_error, sizeof input, cudaMemcpyDeviceToHost));
    for (int i = 0; i < kWaitCount && bad.empty(); ++i)
      if (rec[i].set != 0) bad = describe_wait(m.P, i, rec[i], g.rank0, g.n);
    if (bad.empty() && input.set != 0) bad = describe_input(input, m.E);
    // Reported once: the next run starts clean.
    XSTAGE_CUDA(cudaMemset(g.records, 0, sizeof rec));
    XSTAGE_CUDA(cudaMemset(g.input_error, 0, sizeof input));
    XSTAGE_CUDA(cudaDeviceSynchronize());
  }
  // Every process stops together, or none does.
  if (m.w.max_over_ranks(bad.empty() ? 0.0 : 1.0) == 0) return;
  throw Error(bad.empty() ? "MoE layer: another rank's wait timed out or its input was bad; expected every rank to "
                            "finish (its message says which)"
                          : bad);
}

std::vector<int> MoeLayer::expert_rows(int rank) {
  Impl& m = *impl_;
  Impl::Group& g = m.group_of(rank);
  std::vector<int32_t> offs(size_t(g.n) * m.E_loc);
  XSTAGE_CUDA(cudaSetDevice(g.device));
  XSTAGE_CUDA(cudaStreamSynchronize(g.stream));
  XSTAGE_CUDA(cudaMemcpy(offs.data(), g.offs, offs.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
  std::vector<int> rows(size_t(m.E_loc));
  const size_t first = size_t(rank - g.rank0) * m.E_loc;
  for (size_t e = 0; e < rows.size(); ++e) rows[e] = offs[first + e] - (first + e > 0 ? offs[first + e - 1] : 0);
  return rows;
}

std::vector<MoeTileTrace> MoeLayer::trace(int rank) {
  Impl& m = *impl_;
  Impl::Group& g = m.group_of(rank);
  if (!m.traced) return {};
  const size_t cap = size_t(std::min<int64_t>(g.trace_tiles, std::numeric_limits<int32_t>::max()));
  std::vector<uint64_t> t(2 * cap * 4);
  XSTAGE_CUDA(cudaSetDevice(g.device));
  XSTAGE_CUDA(cudaStreamSynchronize(g.stream));
  XSTAGE_CUDA(cudaMemcpy(t.data(), g.trace, t.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost));
  // Claim indices run 0, 1, ... per GEMM: a GEMM's entries end at the first unwritten one.
  uint64_t t0 = std::numeric_limits<uint64_t>::max();
  for (size_t i = 0; i < 2 * cap; ++i)
    if (t[i * 4] != 0) t0 = std::min(t0, t[i * 4]);
  std::vector<MoeTileTrace> out;
  for (int gemm = 1; gemm <= 2; ++gemm)
    for (size_t i = 0; i < cap; ++i) {
      const uint64_t* r = t.data() + ((size_t(gemm) - 1) * cap + i) * 4;
      if (r[0] == 0) break;
      out.push_back({gemm, int(r[3]), double(r[0] - t0), double(r[1] - t0), double(r[2] - t0)});
    }
  return out;
}

MoePhaseMs MoeLayer::phase_ms(int rank) {
  Impl& m = *impl_;
  Impl::Group& g = m.group_of(rank);
  XSTAGE_CUDA(cudaSetDevice(g.device));
  XSTAGE_CUDA(cudaStreamSynchronize(g.stream));
  auto between = [&](int a, int b) {
    float ms = 0;
    XSTAGE_CUDA(cudaEventElapsedTime(&ms, g.phase[size_t(a)], g.phase[size_t(b)]));
    return double(ms);
  };
  MoePhaseMs p;
  if (g.phase_ran[0]) p.dispatch = between(0, 1);
  if (g.phase_ran[1]) p.experts = between(1, 2);
  if (g.phase_ran[2]) p.combine = between(2, 3);
  return p;
}

}  // namespace xstage
