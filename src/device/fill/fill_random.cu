#include "device/fill/fill_random.hpp"

namespace xstage::fill {

namespace {
__device__ __forceinline__ uint16_t to_bf16_rne(float f) {
  const uint32_t u = __float_as_uint(f);  // finite by construction
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__global__ void sm90_bf16_fill_random(uint16_t* dst, uint64_t n, uint64_t seed, uint64_t stream, uint64_t first) {
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
    dst[i] = to_bf16_rne(fill_random_value(seed, stream, first + i));
}
}  // namespace

int launch_fill_random_bf16(void* dst, uint64_t n, uint64_t seed, uint64_t stream, uint64_t first,
                            cudaStream_t cuda_stream) {
  if (n == 0) return 0;
  const uint64_t blocks = (n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096;
  sm90_bf16_fill_random<<<unsigned(blocks), 256, 0, cuda_stream>>>(static_cast<uint16_t*>(dst), n, seed, stream,
                                                                    first);
  return int(cudaGetLastError());
}

}  // namespace xstage::fill
