#pragma once
// Operand element types of the sm_90a GEMM mainloop (mainloop_sm90.cuh).
// A type says how many of its elements fill one 128-byte swizzle row (the
// k-block a ring stage holds), how the TMA unit names it, and how one
// k-block of wgmma runs on a stage. Everything else of the mainloop (the
// ring, the loads, the descriptors' 32-byte k steps) is the same for every
// type, which is what lets FP8 join without a second mainloop.
//
// A type's k step is kMmaK * kBytes = 32 bytes (bf16: k = 16; FP8 e4m3:
// k = 32), so the descriptors advance the same way for both; what FP8 with
// per-block scales adds is the mainloop's promotion after each k-block (its
// wgmmas into a temporary, added to the accumulators times the block's
// scales: block_scales.cuh).
#include <cstdint>

#include <cuda.h>

#include "device/ptx/wgmma.cuh"

namespace xstage::gemm {

struct Bf16 {
  static constexpr int kBytes = 2;
  static constexpr int kBlockK = 128 / kBytes;  // one 128-byte swizzle row
  static constexpr int kMmaK = 16;              // the k of one wgmma
  static constexpr CUtensorMapDataType kTmaType = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;

  // acc (+)= A x B^T over one k step of kMmaK (scale_d = 0: acc = A x B^T).
  template <int N>
  __device__ __forceinline__ static void mma(float (&acc)[N / 8][4], uint64_t a_desc, uint64_t b_desc, int scale_d) {
    ptx::wgmma_ss_bf16<N>(acc, a_desc, b_desc, scale_d);
  }
};

// FP8 e4m3 operands (the tensor map names them as bytes: the TMA unit only
// moves them). Their products are usually block-scaled: a mainloop of this
// type runs with a promotion (gemm/block_scales.cuh).
struct Fp8E4m3 {
  static constexpr int kBytes = 1;
  static constexpr int kBlockK = 128 / kBytes;
  static constexpr int kMmaK = 32;
  static constexpr CUtensorMapDataType kTmaType = CU_TENSOR_MAP_DATA_TYPE_UINT8;

  template <int N>
  __device__ __forceinline__ static void mma(float (&acc)[N / 8][4], uint64_t a_desc, uint64_t b_desc, int scale_d) {
    ptx::wgmma_ss_e4m3<N>(acc, a_desc, b_desc, scale_d);
  }
};

}  // namespace xstage::gemm
