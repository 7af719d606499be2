// Host side of the attention forward: argument validation with messages that
// say what, where and what was expected; the launch; the CPU reference.
#include "xstage/attention/attention.hpp"

#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "device/attention/attention_launch.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"

namespace xstage {

AttentionStrides contiguous_bshd(int S, int H, int D) {
  return {int64_t(S) * H * D, int64_t(H) * D, int64_t(D)};
}

float effective_scale(const AttentionForwardArgs& a) {
  return std::isnan(a.scale) ? static_cast<float>(1.0 / std::sqrt(double(a.D))) : a.scale;
}

namespace {
void check_strides(const char* name, const AttentionStrides& st) {
  const std::pair<const char*, int64_t> parts[] = {{"b", st.b}, {"s", st.s}, {"h", st.h}};
  for (const auto& [which, v] : parts) {
    if (v <= 0 || v % 8 != 0)
      throw Error(fmt::format("attention: {} stride over {}: expected a positive multiple of 8 elements "
                              "(16-byte rows for the vector loads), got {}",
                              name, which, v));
  }
}

void check_pointer(const char* name, const void* p) {
  if (p == nullptr) throw Error(fmt::format("attention: {}: expected a device pointer, got null", name));
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
    throw Error(fmt::format("attention: {}: expected a 16-byte aligned pointer, got {}", name, p));
}
}  // namespace

void validate_attention_args(const AttentionForwardArgs& a, bool check_pointers) {
  if (a.D != 64 && a.D != 128) throw Error(fmt::format("attention: head dim D: expected 64 or 128, got {}", a.D));
  const std::pair<const char*, int> sizes[] = {{"B", a.B}, {"H", a.H}, {"S_q", a.S_q}, {"S_kv", a.S_kv}};
  for (const auto& [name, v] : sizes)
    if (v < 1) throw Error(fmt::format("attention: {}: expected >= 1, got {}", name, v));
  if (attention::attention_fwd_kernel_shape_of(a.D, int(a.kernel)).threads == 0)
    throw Error(fmt::format("attention: kernel {}: not available for head dim D={}; expected a kernel built for that D",
                            to_string(a.kernel), a.D));
  const float scale = effective_scale(a);
  if (!std::isfinite(scale)) throw Error(fmt::format("attention: scale: expected a finite number, got {}", scale));
  // Tile count and LSE indices in 32/64-bit: keep B * H * S_q within int64 and the grid within 2^31.
  const int64_t m_blocks = (int64_t(a.S_q) + 127) / 128;
  if (m_blocks * a.H * a.B > std::numeric_limits<int32_t>::max())
    throw Error(fmt::format("attention: B * H * ceil(S_q / 128) = {}: expected at most 2^31 - 1 tiles",
                            m_blocks * a.H * a.B));
  if (!check_pointers) return;
  check_strides("q", a.q_stride);
  check_strides("k", a.k_stride);
  check_strides("v", a.v_stride);
  check_strides("o", a.o_stride);
  check_pointer("q", a.q);
  check_pointer("k", a.k);
  check_pointer("v", a.v);
  check_pointer("o", a.o);
  if (a.lse != nullptr && reinterpret_cast<uintptr_t>(a.lse) % 4 != 0)
    throw Error("attention: lse: expected a 4-byte aligned pointer");
}

void attention_forward(const AttentionForwardArgs& a, cudaStream_t stream) {
  validate_attention_args(a, true);
  attention::MainloopParams p;
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.q_stride_b = a.q_stride.b, p.q_stride_s = a.q_stride.s, p.q_stride_h = a.q_stride.h;
  p.k_stride_b = a.k_stride.b, p.k_stride_s = a.k_stride.s, p.k_stride_h = a.k_stride.h;
  p.v_stride_b = a.v_stride.b, p.v_stride_s = a.v_stride.s, p.v_stride_h = a.v_stride.h;
  p.B = a.B, p.H = a.H, p.S_q = a.S_q, p.S_kv = a.S_kv, p.D = a.D;
  p.scale_log2 = static_cast<float>(double(effective_scale(a)) * 1.4426950408889634);
  attention::LocalStoreParams ep;
  ep.o = a.o;
  ep.o_stride_b = a.o_stride.b, ep.o_stride_s = a.o_stride.s, ep.o_stride_h = a.o_stride.h;
  ep.lse = a.lse;
  const int rc = attention::launch_attention_fwd_local_kernel(p, ep, int(a.kernel), stream);
  check_cuda(rc, fmt::format("attention forward ({}) launch (B={} H={} S_q={} S_kv={} D={})",
                             to_string(a.kernel == AttentionKernel::automatic ? attention_default_kernel(a.D) : a.kernel),
                             a.B, a.H, a.S_q, a.S_kv, a.D)
                     .c_str(),
             __FILE__, __LINE__);
}

AttentionKernel parse_attention_kernel(const std::string& name) {
  if (name == "auto") return AttentionKernel::automatic;
  if (name == "mma") return AttentionKernel::mma_sync;
  if (name == "wgmma-basic") return AttentionKernel::wgmma_basic;
  if (name == "wgmma-overlap") return AttentionKernel::wgmma_overlap;
  if (name == "wgmma-pingpong" || name == "wgmma") return AttentionKernel::wgmma_pingpong;
  if (name == "wgmma-n192") return AttentionKernel::wgmma_n192;
  if (name == "wgmma-m192") return AttentionKernel::wgmma_m192;
  if (name == "wgmma-m192-overlap") return AttentionKernel::wgmma_m192_overlap;
  throw Error(fmt::format("attention kernel: expected auto, mma, wgmma, wgmma-basic, wgmma-overlap, "
                          "wgmma-pingpong, wgmma-n192, wgmma-m192 or wgmma-m192-overlap, got '{}'",
                          name));
}

std::string to_string(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::automatic: return "auto";
    case AttentionKernel::mma_sync: return "mma";
    case AttentionKernel::wgmma_basic: return "wgmma-basic";
    case AttentionKernel::wgmma_overlap: return "wgmma-overlap";
    case AttentionKernel::wgmma_pingpong: return "wgmma-pingpong";
    case AttentionKernel::wgmma_n192: return "wgmma-n192";
    case AttentionKernel::wgmma_m192: return "wgmma-m192";
    case AttentionKernel::wgmma_m192_overlap: return "wgmma-m192-overlap";
  }
  return "unknown";
}

AttentionKernel attention_default_kernel(int D) {
  return static_cast<AttentionKernel>(attention::attention_fwd_default_kernel(D));
}

std::string attention_kernel_name(int D, AttentionKernel k) {
  if (k == AttentionKernel::automatic) k = attention_default_kernel(D);
  const auto s = attention::attention_fwd_kernel_shape_of(D, int(k));
  if (s.threads == 0) return fmt::format("none for D={} ({})", D, to_string(k));
  if (k == AttentionKernel::mma_sync)
    return fmt::format("sm90_bf16_attention_fwd<D={}> (mma.sync, BLOCK_M={} BLOCK_N={}, {} threads, {} B smem)", D,
                       s.block_m, s.block_n, s.threads, s.smem_bytes);
  return fmt::format(
      "sm90_bf16_attention_fwd_wgmma<D={}> ({}: TMA + wgmma, warp-specialised, BLOCK_M={} BLOCK_N={}, {} threads, "
      "{} B smem)",
      D, to_string(k), s.block_m, s.block_n, s.threads, s.smem_bytes);
}

double AttentionReference::row(int b, int s, int h, double* out) const {
  const int64_t sb_q = int64_t(S_q) * H * D, sb_kv = int64_t(S_kv) * H * D, ss = int64_t(H) * D;
  const float* qr = q + b * sb_q + s * ss + int64_t(h) * D;
  std::vector<double> sc(S_kv);
  double mx = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < S_kv; ++j) {
    const float* kr = k + b * sb_kv + j * ss + int64_t(h) * D;
    double acc = 0;
    for (int d = 0; d < D; ++d) acc += double(qr[d]) * double(kr[d]);
    sc[j] = acc * scale;
    mx = std::max(mx, sc[j]);
  }
  for (int d = 0; d < D; ++d) out[d] = 0;
  double sum = 0;
  for (int j = 0; j < S_kv; ++j) {
    const double p = std::exp(sc[j] - mx);
    sum += p;
    const float* vr = v + b * sb_kv + j * ss + int64_t(h) * D;
    for (int d = 0; d < D; ++d) out[d] += p * double(vr[d]);
  }
  for (int d = 0; d < D; ++d) out[d] /= sum;
  return mx + std::log(sum);
}

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_float(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace xstage
