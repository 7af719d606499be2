#pragma once
// Online softmax in registers (FlashAttention-2 form), base 2. Each thread
// holds two rows of the warp's 16 (g and g + 8, g = lane / 4); a row is shared
// by the 4 lanes of a quad, so row reductions are two xor-shuffles.
//
// Scores arrive pre-multiplied by scale * log2(e). Per KV tile:
//   m_new = max(m_old, rowmax(s));  p = 2^(s - m_new);  corr = 2^(m_old - m_new)
//   l = l * corr + rowsum(p) (per-thread partial sum);  O = O * corr
// m_old = -inf on the first tile gives corr = 0. Every KV tile holds at least
// one valid key, so m_new is finite from the first tile on.
#include <cmath>

#include "device/ptx/math.cuh"

namespace xstage::attention {

template <int N_BLOCKS>  // n blocks (8 columns) of the score tile
struct OnlineSoftmax {
  float m[2];  // running max (scaled, base-2 domain) of rows g, g + 8
  float l[2];  // this thread's partial row sums (quad-reduced in finalize)

  __device__ __forceinline__ void init() {
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.f;
  }

  // s: raw scores Q.K^T of one tile; scaled in place and turned into
  // probabilities. Columns >= cols_valid (tile-relative) are masked out.
  // Returns the O rescale factors of rows g, g + 8 in corr.
  template <bool MASK>
  __device__ __forceinline__ void step(float (&s)[N_BLOCKS][4], float scale_log2, int cols_valid, int lane,
                                       float (&corr)[2]) {
    const int c0 = 2 * (lane & 3);
#pragma unroll
    for (int nb = 0; nb < N_BLOCKS; ++nb) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[nb][i] *= scale_log2;
        if constexpr (MASK) {
          if (nb * 8 + c0 + (i & 1) >= cols_valid) s[nb][i] = -INFINITY;
        }
      }
    }
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int nb = 0; nb < N_BLOCKS; ++nb) {
      mx[0] = fmaxf(mx[0], fmaxf(s[nb][0], s[nb][1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[nb][2], s[nb][3]));
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      corr[r] = ptx::ex2_approx(m[r] - mx[r]);  // m[r] = -inf on the first tile: 0
      m[r] = mx[r];
    }
    float sum[2] = {0.f, 0.f};
#pragma unroll
    for (int nb = 0; nb < N_BLOCKS; ++nb) {
      s[nb][0] = ptx::ex2_approx(s[nb][0] - mx[0]);
      s[nb][1] = ptx::ex2_approx(s[nb][1] - mx[0]);
      s[nb][2] = ptx::ex2_approx(s[nb][2] - mx[1]);
      s[nb][3] = ptx::ex2_approx(s[nb][3] - mx[1]);
      sum[0] += s[nb][0] + s[nb][1];
      sum[1] += s[nb][2] + s[nb][3];
    }
    l[0] = l[0] * corr[0] + sum[0];
    l[1] = l[1] * corr[1] + sum[1];
  }

  // Full row sums (quad reduction). Call once after the last tile.
  __device__ __forceinline__ void finalize() {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
  }

  // Natural-log log-sum-exp of the scaled scores of row r: (m + log2 l) * ln 2.
  __device__ __forceinline__ float lse(int r) const { return (m[r] + __log2f(l[r])) * 0.69314718055994531f; }
};

// O rows g (o[..][0..1]) and g + 8 (o[..][2..3]) times their factors.
template <int D_BLOCKS>
__device__ __forceinline__ void rescale_rows(float (&o)[D_BLOCKS][4], const float (&f)[2]) {
#pragma unroll
  for (int db = 0; db < D_BLOCKS; ++db) {
    o[db][0] *= f[0];
    o[db][1] *= f[0];
    o[db][2] *= f[1];
    o[db][3] *= f[1];
  }
}

}  // namespace xstage::attention
