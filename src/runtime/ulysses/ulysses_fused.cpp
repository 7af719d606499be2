// The fused Ulysses attention on caller-owned buffers (include/xstage/
// ulysses_fused.hpp): validation, the plan of sizes, and one launch.
#include "xstage/ulysses/ulysses_fused.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "device/attention/attention_launch.hpp"
#include "device/remote/flag_timeout_record.hpp"
#include "device/ulysses/launch.hpp"
#include "runtime/comm/flag_timeout.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/ulysses/ulysses_layout.hpp"

namespace xstage {

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

int kernel_id(AttentionKernel k) {
  if (k == AttentionKernel::wgmma_pingpong) return attention::kKernelWgmmaPingpong;
  if (k == AttentionKernel::mma_sync) return attention::kKernelMmaSync;
  throw Error(fmt::format("ulysses: attention kernel: expected wgmma-pingpong or mma, got {}", to_string(k)));
}

void check_operand(const char* name, const void* p, const AttentionStrides& st) {
  if (p == nullptr) throw Error(fmt::format("ulysses: {}: expected a device pointer, got null", name));
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
    throw Error(fmt::format("ulysses: {}: expected a 16-byte aligned pointer, got {}", name, p));
  for (int64_t v : {st.b, st.s, st.h})
    if (v <= 0 || v % 8 != 0)
      throw Error(fmt::format("ulysses: {} strides (b {}, s {}, h {}): expected positive multiples of 8 elements",
                              name, st.b, st.s, st.h));
}

}  // namespace

UlyssesFusedPlan plan_ulysses_fused(const UlyssesFusedShape& s, AttentionKernel kernel) {
  const int id = kernel_id(kernel);
  if (s.D != 64 && s.D != 128) throw Error(fmt::format("ulysses: head dim D: expected 64 or 128, got {}", s.D));
  if (s.P < 1) throw Error(fmt::format("ulysses: ranks P: expected >= 1, got {}", s.P));
  if (s.rank < 0 || s.rank >= s.P)
    throw Error(fmt::format("ulysses: rank: expected 0 .. {} (P = {}), got {}", s.P - 1, s.P, s.rank));
  if (s.B < 1 || s.H < 1 || s.S < 1)
    throw Error(fmt::format("ulysses: B, H and S: expected >= 1, got B = {}, H = {}, S = {}", s.B, s.H, s.S));
  if (s.H % s.P != 0)
    throw Error(fmt::format("ulysses: H = {} heads do not split over P = {} ranks; expected H a multiple of P", s.H, s.P));
  // The kernels carry S as int and find a row's owner with 32-bit divisions.
  if (s.S > kInt32Max) throw Error(fmt::format("ulysses: S = {}: expected at most 2^31 - 1 tokens", s.S));
  UlyssesFusedPlan plan;
  plan.block_m = attention::attention_fwd_kernel_shape_of(int(s.D), id).block_m;
  const int64_t m_blocks = (s.S + plan.block_m - 1) / plan.block_m;
  const int64_t Hl = s.H / s.P;
  // The at-exit flag walk indexes the launch's tiles in 32 bits.
  if (s.B * Hl * m_blocks > kInt32Max)
    throw Error(fmt::format("ulysses: B * H/P * ceil(S / {}) = {} tiles: expected at most 2^31 - 1", plan.block_m,
                            s.B * Hl * m_blocks));
  const UlyssesLayout layout({s.B, s.S, s.H, s.D, s.P, 2});
  plan.m_blocks = int(m_blocks);
  plan.chunk = layout.chunk_rows();
  plan.seq_rows = layout.seq_rows(s.rank);
  plan.out_elems = s.B * layout.seq_rows(0) * s.H * s.D;
  plan.flag_slots = int64_t(s.P) * s.B * Hl * ulysses::ulysses_flag_stride(plan.chunk, plan.block_m);
  // The receiver wait indexes its flags in 32 bits (device/ulysses/destination.cuh, ReceiverFlags).
  if (plan.flag_slots > kInt32Max)
    throw Error(fmt::format("ulysses: {} completion flags a rank do not fit the receiver wait's 32-bit indices; "
                            "expected at most 2^31 - 1 (smaller B, H or S)",
                            plan.flag_slots));
  return plan;
}

std::vector<int> ulysses_fused_tile_order(const UlyssesFusedShape& s, TileOrder order, AttentionKernel kernel) {
  const UlyssesFusedPlan plan = plan_ulysses_fused(s, kernel);
  const UlyssesLayout layout({s.B, s.S, s.H, s.D, s.P, 2});
  std::vector<int> table;
  table.reserve(size_t(s.P) * size_t(plan.m_blocks));
  for (int r = 0; r < s.P; ++r) {
    const std::vector<int> t = ulysses_tile_order(layout, plan.block_m, order, r);
    table.insert(table.end(), t.begin(), t.end());
  }
  return table;
}

void ulysses_fused_forward(const UlyssesFusedArgs& a, cudaStream_t stream) {
  const UlyssesFusedShape& s = a.shape;
  const UlyssesFusedPlan plan = plan_ulysses_fused(s, a.kernel);
  check_operand("q", a.q, a.q_stride);
  check_operand("k", a.k, a.k_stride);
  check_operand("v", a.v, a.v_stride);
  const std::pair<const char*, const void*> tables[] = {{"output table", a.out_table},
                                                        {"flag table", a.flag_table},
                                                        {"tile order", a.tile_order},
                                                        {"timeout record", a.timeout_record}};
  for (const auto& [name, p] : tables)
    if (p == nullptr) throw Error(fmt::format("ulysses: {}: expected a device pointer, got null", name));
  if (a.epoch == 0) throw Error("ulysses: epoch: expected >= 1 (flags start at 0), got 0");
  if (a.paced_rows < 0)
    throw Error(fmt::format("ulysses: paced rows: expected >= 0 (0: the default {}), got {}", kDefaultPacedRows,
                            a.paced_rows));
  if (!(a.timeout_s > 0)) throw Error(fmt::format("ulysses: timeout: expected > 0 seconds, got {}", a.timeout_s));
  const float scale = std::isnan(a.scale) ? float(1.0 / std::sqrt(double(s.D))) : a.scale;
  if (!std::isfinite(scale)) throw Error(fmt::format("ulysses: scale: expected a finite number, got {}", scale));
  const StorePath store = a.store.value_or(default_store_path(a.kernel, UlyssesVariant::fused, a.flags));
  if (const auto why = ulysses_combination_error(store, UlyssesVariant::fused, a.flags, a.kernel))
    throw Error(fmt::format("ulysses: store path {} with {} flags: {}; expected a combination the kernel runs",
                            to_string(store), to_string(a.flags), *why));

  const int64_t Hl = s.H / s.P;
  attention::MainloopParams p;
  p.q = a.q, p.k = a.k, p.v = a.v;
  p.q_stride_b = a.q_stride.b, p.q_stride_s = a.q_stride.s, p.q_stride_h = a.q_stride.h;
  p.k_stride_b = a.k_stride.b, p.k_stride_s = a.k_stride.s, p.k_stride_h = a.k_stride.h;
  p.v_stride_b = a.v_stride.b, p.v_stride_s = a.v_stride.s, p.v_stride_h = a.v_stride.h;
  p.B = int(s.B), p.H = int(Hl), p.S_q = p.S_kv = int(s.S), p.D = int(s.D);
  p.scale_log2 = float(double(scale) * 1.4426950408889634);

  ulysses::UlyssesStoreParams ep;
  ep.out = a.out_table;
  ep.flags = a.flag_table;
  ep.P = s.P, ep.rank_base = s.rank, ep.batch = int(s.B), ep.heads_per_rank = int(Hl), ep.head_dim = int(s.D);
  ep.S = s.S, ep.chunk = plan.chunk;
  ep.flag_stride = ulysses::ulysses_flag_stride(plan.chunk, plan.block_m);
  ep.epoch = a.epoch;
  // Slices of more rows than a tile has send it whole (as UlyssesAttention does).
  ep.paced_min_rows = std::min(a.paced_rows > 0 ? a.paced_rows : kDefaultPacedRows, plan.block_m);
  ep.receive = 1;  // this launch waits for its own rank's flags (remote/receive.cuh)
  ep.timeout_record = static_cast<remote::FlagTimeoutRecord*>(a.timeout_record);
  ep.recv_rank_first = s.rank, ep.recv_ranks = 1;
  ep.block_m = plan.block_m;
  ep.timeout_ns = static_cast<uint64_t>(a.timeout_s * 1e9);
  ep.recv_epoch = a.epoch;

  sched::OrderedSchedulerParams sp;
  sp.order = a.tile_order;
  sp.batch = int(s.B), sp.rank_base = s.rank;
  check_cuda(ulysses::launch_ulysses_attention(p, ep, sp, store, a.flags, kernel_id(a.kernel), stream),
             fmt::format("fused Ulysses attention launch ({} kernel, rank {} of {}, B = {}, S = {}, H = {}, D = {})",
                         to_string(a.kernel), s.rank, s.P, s.B, s.S, s.H, s.D)
                 .c_str(),
             __FILE__, __LINE__);
}

size_t ulysses_timeout_record_bytes() { return sizeof(remote::FlagTimeoutRecord); }

std::string describe_ulysses_timeout(const void* host_record) {
  const auto& r = *static_cast<const remote::FlagTimeoutRecord*>(host_record);
  if (r.set == 0) return "";
  return fmt::format("ulysses: flag timeout: rank {} waited on flag {} {} in the fused kernel's receiver wait; that "
                     "launch's output is incomplete",
                     r.rank, r.flag, timed_out_values(r));
}

}  // namespace xstage
