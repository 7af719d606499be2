// One launch copies a whole list of strided 2-D blocks, with the widest plain
// stores the list's alignment allows. Destinations may be remote (peer GPU or
// mapped host memory): the stores are the same instructions either way.
#include "device/comm/copy2d_list.hpp"

#include "device/ptx/load.cuh"
#include "device/ptx/store.cuh"
#include "device/ptx/store_narrow.cuh"
#include "xstage/core/device.hpp"

namespace xstage::comm {

namespace {

template <int kBytes>
struct Access;  // one load and one store of kBytes

template <>
struct Access<16> {
  using T = uint4;
  static __device__ __forceinline__ T load(const void* p) { return ptx::ld_global_nc_v4_b32(p); }
  static __device__ __forceinline__ void store(void* p, T v) { ptx::st_global_v4_b32(p, v); }
};
template <>
struct Access<8> {
  using T = uint64_t;
  static __device__ __forceinline__ T load(const void* p) { return ptx::ld_global_nc_b64(p); }
  static __device__ __forceinline__ void store(void* p, T v) { ptx::st_global_b64(p, v); }
};
template <>
struct Access<4> {
  using T = uint32_t;
  static __device__ __forceinline__ T load(const void* p) { return ptx::ld_global_nc_b32(p); }
  static __device__ __forceinline__ void store(void* p, T v) { ptx::st_global_b32(p, v); }
};
template <>
struct Access<2> {
  using T = uint16_t;
  static __device__ __forceinline__ T load(const void* p) { return ptx::ld_global_nc_b16(p); }
  static __device__ __forceinline__ void store(void* p, T v) { ptx::st_global_b16(p, v); }
};
template <>
struct Access<1> {
  using T = uint8_t;
  static __device__ __forceinline__ T load(const void* p) { return ptx::ld_global_nc_b8(p); }
  static __device__ __forceinline__ void store(void* p, T v) { ptx::st_global_b8(p, v); }
};

// Independent loads each lane keeps in flight before its first store: enough
// to cover a row of a few KiB in one pass per warp.
constexpr int kUnroll = 4;

template <int kBytes>
__global__ void __launch_bounds__(kCopy2DThreads)
    sm90_bytes_copy2d_list(const Copy2D* __restrict__ list, const uint64_t* __restrict__ row_start, int n,
                           uint64_t total_rows) {
  static_assert(kBytes == 1 || kBytes == 2 || kBytes == 4 || kBytes == 8 || kBytes == 16,
                "an access is 1, 2, 4, 8 or 16 bytes wide");
  static_assert(kCopy2DThreads % 32 == 0, "whole warps: one warp copies one row");
  using A = Access<kBytes>;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const uint64_t warp = (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const uint64_t warps = static_cast<uint64_t>(gridDim.x) * blockDim.x / 32;
  int k = 0;
  for (uint64_t row = warp; row < total_rows; row += warps) {
    // A warp's rows only grow, so the list cursor only moves forward; it never
    // passes n - 1 because row < total_rows = row_start[n].
    while (k + 1 < n && row >= row_start[k + 1]) ++k;
    const Copy2D c = list[k];
    const uint64_t r = row - row_start[k];
    const char* src = static_cast<const char*>(c.src) + r * c.src_pitch;
    char* dst = static_cast<char*>(c.dst) + r * c.dst_pitch;
    const uint64_t nvec = c.width / kBytes;
    for (uint64_t v0 = lane; v0 < nvec; v0 += 32 * kUnroll) {
      typename A::T x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (v0 + u * 32 < nvec) x[u] = A::load(src + (v0 + u * 32) * kBytes);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (v0 + u * 32 < nvec) A::store(dst + (v0 + u * 32) * kBytes, x[u]);
    }
  }
}

}  // namespace

int copy2d_vector_bytes(const Copy2D* list, size_t n) {
  uint64_t bits = 16;  // caps the result at 16
  for (size_t i = 0; i < n; ++i) {
    const Copy2D& c = list[i];
    bits |= reinterpret_cast<uintptr_t>(c.src) | reinterpret_cast<uintptr_t>(c.dst) | c.width;
    if (c.height > 1) bits |= c.src_pitch | c.dst_pitch;
  }
  return static_cast<int>(bits & (~bits + 1));  // lowest set bit
}

void launch_copy2d_list(const Copy2D* list, const uint64_t* row_start, int n, uint64_t total_rows, int vector_bytes,
                        int blocks, cudaStream_t stream) {
  if (n == 0 || total_rows == 0) return;
  const dim3 grid(blocks), block(kCopy2DThreads);
  switch (vector_bytes) {
    case 16: sm90_bytes_copy2d_list<16><<<grid, block, 0, stream>>>(list, row_start, n, total_rows); break;
    case 8: sm90_bytes_copy2d_list<8><<<grid, block, 0, stream>>>(list, row_start, n, total_rows); break;
    case 4: sm90_bytes_copy2d_list<4><<<grid, block, 0, stream>>>(list, row_start, n, total_rows); break;
    case 2: sm90_bytes_copy2d_list<2><<<grid, block, 0, stream>>>(list, row_start, n, total_rows); break;
    default: sm90_bytes_copy2d_list<1><<<grid, block, 0, stream>>>(list, row_start, n, total_rows); break;
  }
  XSTAGE_CUDA(cudaGetLastError());
}

}  // namespace xstage::comm
