// The generated wgmma wrappers against an fp64 CPU reference: one warpgroup
// computes D (64 x N) = A (64 x 64) * B (64 x N) in four k steps of 16, for
// N = 8, 24, 64, 136, 256 (whole and partial 64-column blocks), by the SS form
// (A and B K-major in shared memory) and by the RS form (A from registers, B
// MN-major in shared memory).
//
// Shared-memory layout: 128-byte swizzle (ptx::sw128_offset), the layout the
// attention kernel's TMA loads produce. K-major operands are rows of the 64
// k-values of one m or n, so any N that is a multiple of 8 is a whole number
// of 8-row atoms. The MN-major B is rows of 64 n-values per k, in 64-column
// blocks 8 KiB apart (the descriptor's LBO); for N not a multiple of 64 the
// last block is only partly read, the rest of its rows unused.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "device/ptx/bulk_copy.cuh"
#include "device/ptx/wgmma.cuh"
#include "gpu/need_gpus.hpp"
#include "xstage/core/device.hpp"

using namespace xstage;

namespace {

constexpr int kM = 64, kK = 64;
constexpr uint32_t kBlockBytes = 64 * 128;  // one 64 x 64 bf16 swizzled block

// a: [kM][kK], b: [kK][N] row-major bf16 bits; d: [kM][N] fp32.
template <int N, bool kRs>
__global__ void __launch_bounds__(128) wgmma_gemm(const uint16_t* a, const uint16_t* b, float* d) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  const uint32_t raw = uint32_t(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023) & ~1023u;  // the swizzle pattern follows address bits 7-9
  uint8_t* sa = smem_raw + (base - raw);
  uint8_t* sb = sa + kBlockBytes;
  const int tid = threadIdx.x;

  for (int i = tid; i < kM * kK; i += 128)
    *reinterpret_cast<uint16_t*>(sa + ptx::sw128_offset(i / kK, i % kK)) = a[i];
  for (int i = tid; i < kK * N; i += 128) {
    const int k = i / N, n = i % N;
    const uint32_t off = kRs ? (n / 64) * kBlockBytes + ptx::sw128_offset(k, n % 64) : ptx::sw128_offset(n, k);
    *reinterpret_cast<uint16_t*>(sb + off) = b[i];
  }
  __syncthreads();
  ptx::fence_proxy_async_shared();  // the generic-proxy stores above -> the wgmma (async proxy) reads

  const int w = tid / 32, g = (tid % 32) / 4, t = tid % 4;
  uint32_t af[kK / 16][4];  // RS: A fragments, rows 16w + g (+8), k pairs 2t (+8)
  const auto* a32 = reinterpret_cast<const uint32_t*>(a);
#pragma unroll
  for (int ks = 0; ks < kK / 16; ++ks)
#pragma unroll
    for (int r = 0; r < 4; ++r) af[ks][r] = a32[((16 * w + g + 8 * (r & 1)) * kK + 16 * ks + 2 * t + 8 * (r >> 1)) / 2];

  float acc[N / 8][4];
#pragma unroll
  for (int i = 0; i < N / 8; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = __int_as_float(0x7fc00000);  // scale_d = 0 must ignore it

  const uint64_t desc_a = ptx::make_smem_desc_sw128(base, 16, 1024);
  const uint64_t desc_b = kRs ? ptx::make_smem_desc_sw128(base + kBlockBytes, kBlockBytes, 1024)
                              : ptx::make_smem_desc_sw128(base + kBlockBytes, 16, 1024);
  ptx::wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kK / 16; ++ks) {
    if constexpr (kRs)  // a k step is 16 rows of 128 bytes of the MN-major B
      ptx::wgmma_rs<N, 1>(acc, af[ks], ptx::smem_desc_advance(desc_b, ks * 16 * 128), ks > 0);
    else  // a k step is 32 bytes into each K-major row
      ptx::wgmma_ss<N, 0, 0>(acc, ptx::smem_desc_advance(desc_a, ks * 32), ptx::smem_desc_advance(desc_b, ks * 32),
                             ks > 0);
  }
  ptx::wgmma_commit_group();
  ptx::wgmma_wait_group<0>();
  ptx::fence_operands(acc);

#pragma unroll
  for (int nb = 0; nb < N / 8; ++nb)
#pragma unroll
    for (int j = 0; j < 4; ++j) d[(16 * w + g + 8 * (j / 2)) * N + 8 * nb + 2 * t + (j % 2)] = acc[nb][j];
}

uint16_t to_bf16(float f) {  // round to nearest even (no NaN inputs here)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
double from_bf16(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <int N, bool kRs>
void check_gemm() {
  SCOPED_TRACE(::testing::Message() << (kRs ? "RS" : "SS") << " N = " << N);
  std::mt19937 rng(N * 2 + kRs);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<uint16_t> ha(kM * kK), hb(kK * N);
  for (auto& x : ha) x = to_bf16(dist(rng));
  for (auto& x : hb) x = to_bf16(dist(rng));

  uint16_t *da = nullptr, *db = nullptr;
  float* dd = nullptr;
  ASSERT_EQ(cudaMalloc(&da, ha.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, hb.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dd, kM * N * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(da, ha.data(), ha.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dd, 0xff, kM * N * sizeof(float)), cudaSuccess);  // NaN: an unwritten element fails
  const size_t smem = kBlockBytes + (N + 63) / 64 * kBlockBytes + 1024;
  wgmma_gemm<N, kRs><<<1, 128, smem>>>(da, db, dd);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> hd(kM * N);
  ASSERT_EQ(cudaMemcpy(hd.data(), dd, hd.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dd);

  int bad = 0;
  for (int m = 0; m < kM; ++m)
    for (int n = 0; n < N; ++n) {
      double ref = 0, mag = 0;
      for (int k = 0; k < kK; ++k) {
        const double p = from_bf16(ha[m * kK + k]) * from_bf16(hb[k * N + n]);
        ref += p;
        mag += std::fabs(p);
      }
      const double got = hd[m * N + n];
      // fp32 sums of kK exact products; the tensor core's internal order and
      // rounding are not specified, so allow well above kK ulp of the magnitude
      // sum (a misplaced operand is off by O(mag)).
      if (!(std::fabs(got - ref) <= 1e-4 * mag + 1e-6) && bad++ < 5)
        ADD_FAILURE() << "D[" << m << "][" << n << "] = " << got << ", expected " << ref;
    }
  EXPECT_EQ(bad, 0);
}

// Whole and partial 64-column blocks, the smallest and the largest N.
template <bool kRs>
void check_all() {
  check_gemm<8, kRs>();
  check_gemm<24, kRs>();
  check_gemm<64, kRs>();
  check_gemm<136, kRs>();
  check_gemm<256, kRs>();
}

}  // namespace

TEST(Wgmma, SsKMajorAB) {
  XSTAGE_NEED_GPUS(1);
  check_all<false>();
}

TEST(Wgmma, RsMnMajorB) {
  XSTAGE_NEED_GPUS(1);
  check_all<true>();
}
