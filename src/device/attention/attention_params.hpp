#pragma once
// Plain parameter blocks of the attention forward kernel, shared by the .cu
// launch file and host C++ (no CUDA types, no host libraries).
//
// Tensors are bf16 in the [B, S, H, D] layout with element strides for B, S
// and H; the D stride is 1. Host validation (src/runtime/attention.cpp)
// guarantees: pointers 16-byte aligned, strides multiples of 8 elements,
// D in {64, 128}, every size >= 1.
#include <cstdint>

#include "device/host_device.hpp"
#include "device/sched/attention_tile.hpp"

namespace xstage::attention {

struct MainloopParams {
  const void* q = nullptr;  // bf16 [B, S_q, H, D]
  const void* k = nullptr;  // bf16 [B, S_kv, H, D]
  const void* v = nullptr;  // bf16 [B, S_kv, H, D]
  int64_t q_stride_b = 0, q_stride_s = 0, q_stride_h = 0;
  int64_t k_stride_b = 0, k_stride_s = 0, k_stride_h = 0;
  int64_t v_stride_b = 0, v_stride_s = 0, v_stride_h = 0;
  int B = 0, H = 0, S_q = 0, S_kv = 0, D = 0;
  float scale_log2 = 0;  // softmax scale * log2(e): the kernel works in base 2
};

// What the tile schedulers (sched/linear.cuh, sched/ordered.cuh) walk.
XSTAGE_HD inline sched::AttentionShape tile_shape(const MainloopParams& p) { return {p.B, p.H, p.S_q}; }

// The local-store epilogue: O (bf16, [B, S_q, H, D] with strides) and the
// optional log-sum-exp (fp32, [B, H, S_q] contiguous, natural log, of the
// scaled scores).
struct LocalStoreParams {
  void* o = nullptr;
  int64_t o_stride_b = 0, o_stride_s = 0, o_stride_h = 0;
  float* lse = nullptr;  // nullptr: not written
};

}  // namespace xstage::attention
