#pragma once
// Random bf16 tensors drawn on the GPU from (seed, stream id, element index):
// the same values for the same arguments on any GPU and in any process, so
// ranks fill their own shards and a checker can redraw any element on the CPU
// (fill_random_value) without moving the tensor.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "device/host_device.hpp"

namespace xstage::fill {

// Uniform in [-1, 1), rounded to bf16 (round to nearest even).
XSTAGE_HD inline float fill_random_value(uint64_t seed, uint64_t stream, uint64_t i) {
  // splitmix64 of a mix of the three: cheap, and every bit of each input matters.
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + stream * 0xD1B54A32D192ED03ull + i * 0xBF58476D1CE4E5B9ull + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return float(int64_t(z >> 40) - (int64_t(1) << 23)) * (1.0f / float(1 << 23));
}

// dst[i] = bf16(fill_random_value(seed, stream, first + i)) for i < n.
int launch_fill_random_bf16(void* dst, uint64_t n, uint64_t seed, uint64_t stream, uint64_t first,
                            cudaStream_t cuda_stream);

}  // namespace xstage::fill
