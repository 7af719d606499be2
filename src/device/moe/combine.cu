// Combine: each rank sums its tokens' k expert rows in fp32, in slot order
// j = 0 .. k-1, and rounds once to bf16. The fused and the unfused layer
// differ only in where row j of token t sits (the fused kernel's L2 stored it
// at slot j * T_max + t; the unfused baseline's all-to-all left it in the
// source's send order), so both sum the same bf16 values in the same order
// and give the same bits.
//
// Fused: the rows were stored by other ranks' kernels, so every CTA first
// waits (timed) for flag_done(P, r) of every rank r: r's expert kernel
// releases it once all of its stores are out. A separate kernel, because
// this wait needs every rank's expert kernel finished, and a persistent
// kernel cannot wait for other ranks' grids without knowing they are
// resident (emulated ranks share one GPU).
//
// Unfused: the caller's stream order (the copies came first) stands in for
// the flags.
#include "device/moe/layer_comm_launch.hpp"
#include "device/moe/layer_device.cuh"
#include "device/ptx/math.cuh"

namespace xstage::moe {

namespace {

constexpr int kCombineThreads = 256;
constexpr int kTokensPerCta = kCombineThreads / 32;  // a warp a token
constexpr int kBatch = 8;                            // slots loaded before they are added

__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xFFFF0000u); }

__global__ void __launch_bounds__(kCombineThreads) sm90_moe_combine(CombineParams p) {
  const int li = int(blockIdx.y), s = p.rank0 + li;
  const int T = p.tokens[li];
  if (int(blockIdx.x) * kTokensPerCta >= T) return;  // no token of this rank for the CTA (uniform)
  const bool fused = p.pos == nullptr;
  if (fused) {
    const bool ok = wait_flags_geq(
        p.P,
        [&](int r, int& rank, int& index) {
          rank = s, index = layer_flag_done(p.P, r);
          return static_cast<const uint64_t*>(p.flags[s] + index);
        },
        p.epoch, p.timeout_ns, p.timeout_record);
    if (!ok) return;  // the host reports the record; the output keeps its last contents
  }
  const uint16_t* rows = static_cast<const uint16_t*>(p.combine[s]);
  uint16_t* out = static_cast<uint16_t*>(p.out) + int64_t(li) * p.T_max * p.H;
  const int64_t pairs = int64_t(li) * p.T_max * p.k;
  const int32_t* send_base = p.send_base + int64_t(li) * (p.E + 1);
  const int lane = int(threadIdx.x) & 31;
  const int vecs = p.H / 8;
  for (int t = int(blockIdx.x) * kTokensPerCta + (int(threadIdx.x) >> 5); t < T; t += int(gridDim.x) * kTokensPerCta) {
    for (int v = lane; v < vecs; v += 32) {
      float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      // kBatch slots' loads in flight before the first add (a row of host
      // memory is microseconds away); the adds keep slot order.
      for (int j0 = 0; j0 < p.k; j0 += kBatch) {
        uint4 x[kBatch];
        bool have[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int j = j0 + u;
          have[u] = false;
          if (j >= p.k) continue;
          int64_t row;
          if (fused) {
            row = int64_t(j) * p.T_max + t;
          } else {
            const int64_t pair = pairs + int64_t(t) * p.k + j;
            const int e = p.topk_ids[pair];
            if (e < 0 || e >= p.E) continue;  // a bad id routed nothing (the route kernel recorded it)
            const int32_t i = p.pos[pair];
            if (i < 0) continue;  // a repeated id: only its first slot was routed
            row = int64_t(send_base[e]) + i;
          }
          x[u] = __ldcg(reinterpret_cast<const uint4*>(rows + row * p.H) + v);
          have[u] = true;
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          if (!have[u]) continue;
          acc[0] += bf16_lo(x[u].x), acc[1] += bf16_hi(x[u].x), acc[2] += bf16_lo(x[u].y), acc[3] += bf16_hi(x[u].y);
          acc[4] += bf16_lo(x[u].z), acc[5] += bf16_hi(x[u].z), acc[6] += bf16_lo(x[u].w), acc[7] += bf16_hi(x[u].w);
        }
      }
      const uint4 o = make_uint4(ptx::pack_bf16x2(acc[0], acc[1]), ptx::pack_bf16x2(acc[2], acc[3]),
                                 ptx::pack_bf16x2(acc[4], acc[5]), ptx::pack_bf16x2(acc[6], acc[7]));
      ptx::st_global_v4_b32(reinterpret_cast<uint4*>(out + int64_t(t) * p.H) + v, o);
    }
  }
}

}  // namespace

int launch_moe_combine(const CombineParams& p, cudaStream_t stream) {
  const unsigned blocks = unsigned((p.T_max + kTokensPerCta - 1) / kTokensPerCta);
  sm90_moe_combine<<<dim3(blocks, unsigned(p.n)), kCombineThreads, 0, stream>>>(p);
  return int(cudaGetLastError());
}

}  // namespace xstage::moe
