#pragma once
// TMA bulk copies (cp.async.bulk, sm_90) from shared memory to global memory,
// completed through a bulk async-group. The global side may be remote.
#include <cstdint>

namespace xstage::ptx {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Shared memory written with ordinary stores must be made visible to the
// async proxy (the TMA unit) before a bulk copy reads it.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// bytes: a multiple of 16; both addresses 16-byte aligned.
__device__ __forceinline__ void bulk_store_s2g(void* gdst, const void* ssrc, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(gdst), "r"(smem_addr(ssrc)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Waits until the committed bulk groups have *read* their shared source (the
// issuer may reuse the buffer); says nothing about remote visibility.
__device__ __forceinline__ void bulk_wait_group_read_all() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

// The same, leaving the newest N groups pending (a buffer of N + 1 in turn).
template <int N>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// Orders this thread's completed async-proxy (bulk copy) writes to global
// memory before its later generic-proxy accesses (a release made after a
// barrier, for instance).
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

// A bulk copy from global to shared memory, completing `bytes` transaction
// bytes on the shared barrier `bar` (announce them first: mbar_arrive_expect_tx).
// bytes: a multiple of 16; both addresses 16-byte aligned. Global data other
// threads wrote with ordinary stores needs fence_proxy_async_global by the
// issuer after it acquired them.
__device__ __forceinline__ void bulk_load_g2s(void* sdst, const void* gsrc, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(sdst)),
               "l"(gsrc), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}

// Waits until the committed bulk groups are complete (writes performed).
__device__ __forceinline__ void bulk_wait_group_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

}  // namespace xstage::ptx
