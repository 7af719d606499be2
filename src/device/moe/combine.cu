// Combine: each rank sums its tokens' k expert rows in fp32, in slot order
// j = 0 .. k-1, and rounds once to bf16. The fused and the unfused layer
// differ only in where row j of token t sits (the fused kernel's L2 stored it
// at slot j * T_max + t; the unfused baseline's all-to-all left it in the
// source's send order), so both sum the same bf16 values in the same order
// and give the same bits.
//
// Fused: the rows were stored by other ranks' kernels, so a wait kernel
// (wait_flags.cu) first waits, timed, for flag_done(P, r) of every rank r:
// r's expert kernel releases it once all of its stores are out. Separate
// kernels, because this wait needs every rank's expert kernel finished, and
// a persistent kernel cannot wait for other ranks' grids without knowing
// they are resident (emulated ranks share one GPU).
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
// 16-byte loads a lane keeps in flight before its first add: a row in host
// memory is microseconds away, so the link's rate needs many reads in
// flight, and k slots alone give too few where k is small (2 for Mixtral
// and HiDream).
constexpr int kLoadsInFlight = 8;

__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xFFFF0000u); }

// kSlots slots times kVecs vectors (32 apart) a lane a batch, kSlots * kVecs =
// kLoadsInFlight. The adds keep slot order for every element, so the sum is
// the same whatever the batch shape.
template <int kSlots, int kVecs>
__global__ void __launch_bounds__(kCombineThreads) sm90_moe_combine(CombineParams p) {
  static_assert(kSlots * kVecs == kLoadsInFlight);
  const int li = int(blockIdx.y), s = p.rank0 + li;
  const int T = p.tokens[li];
  if (int(blockIdx.x) * kTokensPerCta >= T) return;  // no token of this rank for the CTA (uniform)
  const bool fused = p.send_base == nullptr;
  // The rows never came (fused), or this rank's rows are not this run's (its
  // dispatch or expert kernel's wait failed): the output keeps its last contents.
  if ((fused && remote::wait_given_up(p.timeout_record)) || any_wait_failed(p.earlier_records, p.earlier_count)) return;
  const uint16_t* rows = static_cast<const uint16_t*>(p.combine[s]);
  uint16_t* out = static_cast<uint16_t*>(p.out) + int64_t(li) * p.T_max * p.H;
  const int64_t pairs = int64_t(li) * p.T_max * p.k;
  const int32_t* send_base = fused ? nullptr : p.send_base + int64_t(li) * (p.E + 1);
  const int lane = int(threadIdx.x) & 31;
  const int vecs = p.H / 8;
  for (int t = int(blockIdx.x) * kTokensPerCta + (int(threadIdx.x) >> 5); t < T; t += int(gridDim.x) * kTokensPerCta) {
    for (int v0 = lane; v0 < vecs; v0 += 32 * kVecs) {
      float acc[kVecs][8];
#pragma unroll
      for (int w = 0; w < kVecs; ++w)
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[w][c] = 0.f;
      for (int j0 = 0; j0 < p.k; j0 += kSlots) {
        uint4 x[kSlots][kVecs];
        bool have[kSlots];
#pragma unroll
        for (int u = 0; u < kSlots; ++u) {
          const int j = j0 + u;
          have[u] = false;
          if (j >= p.k) continue;
          // A pair the route left out (an id out of range, or one that repeats an earlier slot's: the
          // route kernel recorded it) has no row of this run: it adds nothing, in both layers. Its slot
          // of the fused layer's combine buffer still holds an earlier run's row.
          const int64_t pair = pairs + int64_t(t) * p.k + j;
          const int e = p.topk_ids[pair];
          if (e < 0 || e >= p.E) continue;
          const int32_t i = p.pos[pair];
          if (i < 0) continue;
          const int64_t row = fused ? int64_t(j) * p.T_max + t : int64_t(send_base[e]) + i;
          const uint4* src = reinterpret_cast<const uint4*>(rows + row * p.H);
#pragma unroll
          for (int w = 0; w < kVecs; ++w)
            if (v0 + 32 * w < vecs) x[u][w] = __ldcg(src + v0 + 32 * w);
          have[u] = true;
        }
#pragma unroll
        for (int u = 0; u < kSlots; ++u) {
          if (!have[u]) continue;
#pragma unroll
          for (int w = 0; w < kVecs; ++w) {
            if (v0 + 32 * w >= vecs) continue;
            const uint4 y = x[u][w];
            float* a = acc[w];
            a[0] += bf16_lo(y.x), a[1] += bf16_hi(y.x), a[2] += bf16_lo(y.y), a[3] += bf16_hi(y.y);
            a[4] += bf16_lo(y.z), a[5] += bf16_hi(y.z), a[6] += bf16_lo(y.w), a[7] += bf16_hi(y.w);
          }
        }
      }
#pragma unroll
      for (int w = 0; w < kVecs; ++w) {
        if (v0 + 32 * w >= vecs) continue;
        const float* a = acc[w];
        const uint4 o = make_uint4(ptx::pack_bf16x2(a[0], a[1]), ptx::pack_bf16x2(a[2], a[3]),
                                   ptx::pack_bf16x2(a[4], a[5]), ptx::pack_bf16x2(a[6], a[7]));
        ptx::st_global_v4_b32(reinterpret_cast<uint4*>(out + int64_t(t) * p.H) + v0 + 32 * w, o);
      }
    }
  }
}

}  // namespace

int preload_moe_combine() {
  cudaFuncAttributes a;
  cudaError_t e = cudaFuncGetAttributes(&a, sm90_moe_combine<8, 1>);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, sm90_moe_combine<4, 2>);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, sm90_moe_combine<2, 4>);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, sm90_moe_combine<1, 8>);
  return int(e);
}

int launch_moe_combine(const CombineParams& p, cudaStream_t stream) {
  const dim3 grid(unsigned((p.T_max + kTokensPerCta - 1) / kTokensPerCta), unsigned(p.n));
  // Slots a batch: the largest power of two up to k (at most 8); the rest
  // of the loads in flight go to more vectors of the row.
  if (p.k >= 8)
    sm90_moe_combine<8, 1><<<grid, kCombineThreads, 0, stream>>>(p);
  else if (p.k >= 4)
    sm90_moe_combine<4, 2><<<grid, kCombineThreads, 0, stream>>>(p);
  else if (p.k >= 2)
    sm90_moe_combine<2, 4><<<grid, kCombineThreads, 0, stream>>>(p);
  else
    sm90_moe_combine<1, 8><<<grid, kCombineThreads, 0, stream>>>(p);
  return int(cudaGetLastError());
}

}  // namespace xstage::moe
