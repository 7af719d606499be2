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
    if (bad.empty()) bad = describe_moe_records(m.P, g.rank0, g.n, m.E, rec, input);
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
