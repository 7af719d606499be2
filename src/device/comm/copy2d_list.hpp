#pragma once
// A list of strided 2-D copies executed by one kernel launch with plain
// loads and stores: the store-kernel all-to-all (destinations are peer
// pointers) and the local pack/unpack around NCCL's all-to-all. Host-side
// declarations only; the kernel is in copy2d_list.cu.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace xstage::comm {

// `height` rows of `width` bytes; row k is read at src + k*src_pitch and
// written at dst + k*dst_pitch. dst may be any rank's buffer.
struct Copy2D {
  const void* src = nullptr;
  void* dst = nullptr;
  uint64_t src_pitch = 0, dst_pitch = 0, width = 0, height = 0;
};

// The widest access (16, 8, 4, 2 or 1 bytes) that every address, pitch and
// width of the list is aligned to.
int copy2d_vector_bytes(const Copy2D* list, size_t n);

// list (n entries) and row_start (n + 1 prefix sums of the heights) are in the
// memory of the launching GPU. One warp copies one row at a time, rows in list
// order, so that consecutive warps write consecutive destination rows.
void launch_copy2d_list(const Copy2D* list, const uint64_t* row_start, int n, uint64_t total_rows, int vector_bytes,
                        int blocks, cudaStream_t stream);

constexpr int kCopy2DThreads = 256;  // 8 warps per CTA

}  // namespace xstage::comm
