#pragma once
// Release/acquire flags at system scope: a producer publishes data with
// st.release.sys after its stores; a consumer that sees the flag with
// ld.acquire.sys also sees the data. The waits on them are
// remote/timed_wait.cuh's (a timeout leaves a record naming rank, flag and
// values; no wait hangs).
#include <cstdint>

namespace xstage::ptx {

__device__ __forceinline__ void st_release_sys_u64(uint64_t* flag, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(flag), "l"(v) : "memory");
}

// Polling without acquire: follow the last poll with fence_acq_rel_sys (an
// acquire pattern) before reading the data the flags publish.
__device__ __forceinline__ uint64_t ld_relaxed_sys_u64(const uint64_t* flag) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(flag) : "memory");
  return v;
}

// A system-scope load of a data word: served by the memory that owns the
// address, not a cache (the completion-coupled check reads a stored word back
// through the same path as the writes queued ahead of it).
__device__ __forceinline__ uint32_t ld_relaxed_sys_u32(const void* p) {
  uint32_t v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Keeps a value (and the loads it came from) alive without emitting code.
__device__ __forceinline__ void keep(uint32_t v) { asm volatile("" ::"r"(v)); }

__device__ __forceinline__ uint64_t ld_acquire_sys_u64(const uint64_t* flag) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(flag) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t atom_add_release_sys_u64(uint64_t* flag, uint64_t v) {
  uint64_t old;
  asm volatile("atom.add.release.sys.global.u64 %0, [%1], %2;" : "=l"(old) : "l"(flag), "l"(v) : "memory");
  return old;
}

}  // namespace xstage::ptx
