// The GEMM mainloop with FP8 e4m3 operands and block scales (gemm::Fp8E4m3,
// gemm::BlockScales): the same mainloop the bf16 GEMMs run, its element type
// and promotion the only difference, against an fp64 CPU reference.
// C = sum over 128-k blocks of sa[row][kb] * sb[col / 128][kb] * (A_kb x B_kb^T),
// A [M, K] and B [N, K] e4m3, K-major, K a multiple of 16 (a TMA map's row
// pitch is a multiple of 16 bytes; the first GPU run, with K = 600, had its
// maps refused). Shapes: K not a multiple of 128 (the
// last k-block's tail zero-filled by the TMA unit), two tile shapes (128 x 128
// tiles of one B scale block; 64 x 256 tiles whose two warpgroups sit in two),
// outputs poisoned before the launch.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "device/gemm/mainloop_sm90.cuh"
#include "device/gemm/tensor_maps.cuh"
#include "device/ptx/mbarrier.cuh"
#include "gpu/need_gpus.hpp"
#include "xstage/core/device.hpp"

using namespace xstage;

namespace {

// One CTA a BM x BN tile: a producer thread loads every k-block, two
// consumer warpgroups run the mainloop with the block-scale promotion and
// write their fp32 accumulators (rows 16w + g, + 8; columns 8nb + 2t, + 1).
template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, 1)
    fp8_block_scaled_gemm(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                          const float* sa, const float* sb, int scale_pitch, int k_blocks, float* c, int M, int N) {
  constexpr int WN = Cfg::WG_TILE_N;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const gemm::Sm90Mainloop<Cfg> mainloop(smem, reinterpret_cast<uint64_t*>(smem + Cfg::OFF_BAR));
  const int tid = threadIdx.x;
  if (tid == 0) {
    mainloop.init();
    ptx::mbar_fence_init();
  }
  __syncthreads();
  const int m0 = blockIdx.x * Cfg::BLOCK_M, n0 = blockIdx.y * Cfg::BLOCK_N;
  uint32_t it = 0;
  if (tid < 128) {
    if (tid == 0) mainloop.load(it, &a_map, &b_map, m0, n0, 0, k_blocks);
    return;
  }
  const int cwg = (tid - 128) / 128;
  const int wg_m = Cfg::WG_M == 2 ? cwg : 0, wg_n = Cfg::WG_N == 2 ? cwg : 0;
  const int warp = (tid / 32) % 4, lane = tid & 31;
  gemm::BlockScales scales;
  scales.a = sa, scales.b = sb, scales.a_pitch = scale_pitch, scales.b_pitch = scale_pitch;
  scales.a_row0 = m0 + wg_m * 64, scales.col0 = n0 + wg_n * WN;
  scales.a_rows = M, scales.b_blocks = (N + 127) / 128;
  float acc[WN / 8][4];
  mainloop.template mma<WN>(it, acc, mainloop.a_desc(wg_m), mainloop.b_desc(wg_n), 0, k_blocks, lane, scales);
  const int row = scales.a_row0 + warp * 16 + lane / 4;
#pragma unroll
  for (int nb = 0; nb < WN / 8; ++nb) {
    const int col = scales.col0 + nb * 8 + 2 * (lane % 4);
    if (col >= N) continue;  // N is even: col + 1 < N too
    if (row < M) c[int64_t(row) * N + col] = acc[nb][0], c[int64_t(row) * N + col + 1] = acc[nb][1];
    if (row + 8 < M) c[int64_t(row + 8) * N + col] = acc[nb][2], c[int64_t(row + 8) * N + col + 1] = acc[nb][3];
  }
}

// e4m3 (the "fn" variant: no infinities, S.1111.111 is NaN) to double.
double e4m3_value(uint8_t v) {
  const int sign = v >> 7, e = (v >> 3) & 15, m = v & 7;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return sign ? -mag : mag;
}

template <class Cfg>
void check_block_scaled(int M, int N, int K, uint32_t seed) {
  ASSERT_EQ(N % 16, 0);  // 16-byte rows of e4m3 for the tensor map
  const int kb_count = (K + 127) / 128;
  std::mt19937 rng(seed);
  // Codes with exponent 4..9 (magnitudes 1/8 .. 7.5) and either sign: sums of
  // 128 products stay far from e4m3's and fp32's limits, and no NaN is drawn.
  auto code = [&] { return uint8_t((rng() & 0x80) | ((4 + rng() % 6) << 3) | (rng() & 7)); };
  std::vector<uint8_t> a(size_t(M) * K), b(size_t(N) * K);
  for (auto& v : a) v = code();
  for (auto& v : b) v = code();
  std::uniform_real_distribution<float> scale(0.25f, 2.0f);
  std::vector<float> sa(size_t(M) * kb_count), sb(size_t((N + 127) / 128) * kb_count);
  for (auto& v : sa) v = scale(rng);
  for (auto& v : sb) v = scale(rng);

  uint8_t *da = nullptr, *db = nullptr;
  float *dsa = nullptr, *dsb = nullptr, *dc = nullptr;
  ASSERT_EQ(cudaMalloc(&da, a.size()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, b.size()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dsa, sa.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dsb, sb.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dc, size_t(M) * N * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dsa, sa.data(), sa.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dsb, sb.data(), sb.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dc, 0xFF, size_t(M) * N * 4), cudaSuccess);  // NaN: a value never written shows

  CUtensorMap am{}, bm{};
  ASSERT_EQ(gemm::encode_rows_k<gemm::Fp8E4m3>(&am, da, K, M, Cfg::BLOCK_M), 0);
  ASSERT_EQ(gemm::encode_rows_k<gemm::Fp8E4m3>(&bm, db, K, N, Cfg::BLOCK_N), 0);
  auto* kernel = fp8_block_scaled_gemm<Cfg>;
  ASSERT_EQ(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Cfg::SMEM_BYTES)),
            cudaSuccess);
  const dim3 grid((M + Cfg::BLOCK_M - 1) / Cfg::BLOCK_M, (N + Cfg::BLOCK_N - 1) / Cfg::BLOCK_N);
  kernel<<<grid, Cfg::THREADS, Cfg::SMEM_BYTES>>>(am, bm, dsa, dsb, kb_count, kb_count, dc, M, N);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> c(size_t(M) * N);
  ASSERT_EQ(cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dsa), static_cast<void*>(dsb),
                  static_cast<void*>(dc)})
    ASSERT_EQ(cudaFree(p), cudaSuccess);

  std::vector<double> av(a.size()), bv(b.size());
  for (size_t i = 0; i < a.size(); ++i) av[i] = e4m3_value(a[i]);
  for (size_t i = 0; i < b.size(); ++i) bv[i] = e4m3_value(b[i]);
  double err2 = 0, ref2 = 0, worst = 0;
  int bad = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double ref = 0;
      for (int kb = 0; kb < kb_count; ++kb) {
        double part = 0;
        for (int k = kb * 128; k < std::min(K, kb * 128 + 128); ++k) part += av[size_t(m) * K + k] * bv[size_t(n) * K + k];
        ref += part * sa[size_t(m) * kb_count + kb] * sb[size_t(n / 128) * kb_count + kb];
      }
      const double got = c[size_t(m) * N + n], d = got - ref;
      if (!std::isfinite(got)) ++bad;
      err2 += d * d, ref2 += ref * ref, worst = std::max(worst, std::fabs(d));
    }
  EXPECT_EQ(bad, 0) << "outputs left unwritten (NaN) or not finite";
  const double rel = std::sqrt(err2 / ref2);
  // The products of two e4m3 values are exact in fp32; what is left is the
  // tensor core's accumulation inside a k-block (about 14 bits for FP8 on
  // Hopper) and the fp32 promotion: 1e-3 leaves a wide margin, while a scale
  // applied to the wrong row, column block or k-block is off by tens of percent.
  EXPECT_LT(rel, 1e-3) << "M " << M << " N " << N << " K " << K << ": relative Frobenius error " << rel
                       << ", worst element off by " << worst;
}

using Tile128x128 = gemm::TileConfig<gemm::Fp8E4m3, 128, 128, 1>;
using Tile64x256 = gemm::TileConfig<gemm::Fp8E4m3, 64, 256, 2>;

TEST(GemmFp8, BlockScaledMainloopMatchesTheReference128x128) {
  XSTAGE_NEED_GPUS(1);
  check_block_scaled<Tile128x128>(256, 384, 592, 381);  // K = 4 k-blocks + 80: a zero-filled tail
  check_block_scaled<Tile128x128>(128, 128, 128, 382);  // one k-block
  // A partial m-tile and n-tile: rows past M read the last row's scale, not past the array (the B blocks start
  // at multiples of 128 here, so the B clamp is the 64 x 256 case's; only compute-sanitizer's memcheck sees a
  // read past the arrays: the values it would read multiply TMA's zero fill).
  check_block_scaled<Tile128x128>(200, 336, 592, 384);
}

TEST(GemmFp8, BlockScaledMainloopMatchesTheReference64x256) {
  XSTAGE_NEED_GPUS(1);
  check_block_scaled<Tile64x256>(192, 512, 1008, 383);  // each warpgroup's 128 columns its own B scale block
  // Partial tiles: the second n-tile's second warpgroup (columns 384-511) lies wholly past N = 272, past B's scale
  // blocks.
  check_block_scaled<Tile64x256>(70, 272, 1008, 385);
}

}  // namespace
