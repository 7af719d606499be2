#pragma once
// Ampere-style asynchronous global -> shared copies (cp.async, sm_80+), one
// 16-byte chunk per thread, grouped with commit/wait. The zero-fill form reads
// nothing from global memory when `valid` is false and writes 16 zero bytes:
// the tile loaders use it for rows past the end of a sequence.
#include <cstdint>

#include "device/ptx/bulk_copy.cuh"  // smem_addr

namespace xstage::ptx {

// Both addresses 16-byte aligned. `gsrc` must still be a valid address when
// !valid (no byte is read; pass the tensor's base pointer).
__device__ __forceinline__ void cp_async_cg_16_zfill(void* sdst, const void* gsrc, bool valid) {
  const uint32_t src_bytes = valid ? 16u : 0u;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(sdst)), "l"(gsrc), "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit_group() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// Waits until at most N of this thread's committed groups are still pending.
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  static_assert(N >= 0 && N <= 7, "cp.async.wait_group: N must be 0..7");
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace xstage::ptx
