// The one-GPU MoE layer's combine (token_route_params.hpp): each token's
// output is the sum of its k rows of L2's output (the routing weight is
// already in them: L1's epilogue applied it), added in fp32 in slot order
// 0 .. k-1 and rounded to bf16 once, so the output is the same bits on every
// run whatever rows the routing gave the pairs.
#include "device/moe/token_route_params.hpp"
#include "device/ptx/math.cuh"
#include "device/ptx/store.cuh"

namespace xstage::moe {

namespace {

constexpr int kCombineThreads = 256;
constexpr int kTokensPerCta = kCombineThreads / 32;  // a warp a token
constexpr int kVecs = 4;  // 16-byte loads a lane keeps in flight for each slot

__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xFFFF0000u); }

__global__ void __launch_bounds__(kCombineThreads) token_combine(TokenCombineParams p) {
  const int lane = int(threadIdx.x) & 31;
  const int vecs = p.H / 8;
  const uint4* y = static_cast<const uint4*>(p.y);
  for (int t = int(blockIdx.x) * kTokensPerCta + (int(threadIdx.x) >> 5); t < p.T;
       t += int(gridDim.x) * kTokensPerCta) {
    // Lane j holds slot j's row (k <= 32): one load for the token's whole map.
    const int32_t lane_row = lane < p.k ? p.pos[int64_t(t) * p.k + lane] : -1;
    // The whole warp takes every pass (the shuffle below needs all 32 lanes);
    // lanes past the row's end only skip their loads and stores.
    for (int pass = 0; pass < vecs; pass += 32 * kVecs) {
      const int v0 = pass + lane;
      float acc[kVecs][8];
#pragma unroll
      for (int w = 0; w < kVecs; ++w)
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[w][c] = 0.f;
      for (int j = 0; j < p.k; ++j) {
        const int32_t row = __shfl_sync(~0u, lane_row, j);
        if (row < 0) continue;  // routed nowhere (bad id): adds nothing; uniform over the warp
        const uint4* src = y + int64_t(row) * vecs;
        uint4 v[kVecs];
#pragma unroll
        for (int w = 0; w < kVecs; ++w)
          if (v0 + 32 * w < vecs) v[w] = src[v0 + 32 * w];
#pragma unroll
        for (int w = 0; w < kVecs; ++w) {
          if (v0 + 32 * w >= vecs) continue;
          float* a = acc[w];
          a[0] += bf16_lo(v[w].x), a[1] += bf16_hi(v[w].x), a[2] += bf16_lo(v[w].y), a[3] += bf16_hi(v[w].y);
          a[4] += bf16_lo(v[w].z), a[5] += bf16_hi(v[w].z), a[6] += bf16_lo(v[w].w), a[7] += bf16_hi(v[w].w);
        }
      }
      uint4* out = static_cast<uint4*>(p.out) + int64_t(t) * vecs;
#pragma unroll
      for (int w = 0; w < kVecs; ++w) {
        if (v0 + 32 * w >= vecs) continue;
        const float* a = acc[w];
        ptx::st_global_v4_b32(out + v0 + 32 * w,
                              make_uint4(ptx::pack_bf16x2(a[0], a[1]), ptx::pack_bf16x2(a[2], a[3]),
                                         ptx::pack_bf16x2(a[4], a[5]), ptx::pack_bf16x2(a[6], a[7])));
      }
    }
  }
}

}  // namespace

int launch_token_combine(const TokenCombineParams& p, cudaStream_t stream) {
  const int grid = (p.T + kTokensPerCta - 1) / kTokensPerCta;
  token_combine<<<unsigned(grid), kCombineThreads, 0, stream>>>(p);
  return int(cudaGetLastError());
}

}  // namespace xstage::moe
