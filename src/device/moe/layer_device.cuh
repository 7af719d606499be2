#pragma once
// What the MoE layer's communication kernels share: a warp's copy of one
// bf16 row, the timed wait on a set of flags, and a CTA-wide exclusive scan
// in shared memory.
#include <cstdint>

#include "device/ptx/fence.cuh"
#include "device/ptx/flags.cuh"
#include "device/ptx/store.cuh"
#include "device/remote/timed_wait.cuh"

namespace xstage::moe {

// The run's epoch: in device memory when the caller keeps it there (a CUDA
// graph replays kernel parameters unchanged, so a replayed run must read a
// value the stream advanced: launch_moe_run_begin), else the launch's value.
__device__ __forceinline__ uint64_t run_epoch(const uint64_t* at, uint64_t value) {
  return at != nullptr ? *at : value;
}

// One warp copies `vecs` 16-byte vectors from src to dst. The source is read
// through L2 (ld.global.cg): it may be another rank's memory or mapped host
// memory that another agent wrote before the flag this kernel acquired, so
// neither L1 nor the non-coherent path may hold an older copy. Loads of a
// pass are all issued before its stores, so a remote row's round trips overlap.
__device__ __forceinline__ void warp_copy_row(const uint4* src, uint4* dst, int vecs, int lane) {
  constexpr int kUnroll = 4;
  for (int v0 = lane; v0 < vecs; v0 += 32 * kUnroll) {
    uint4 x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (v0 + u * 32 < vecs) x[u] = __ldcg(src + v0 + u * 32);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (v0 + u * 32 < vecs) ptx::st_global_v4_b32(dst + v0 + u * 32, x[u]);
  }
}

// Every thread of the CTA calls it. Threads take flags g = tid, tid +
// blockDim.x, ... of `count`; flag_of(g, rank, index) returns flag g's
// address and names it. Polls are relaxed; a thread that saw all of its
// flags fences (acquire at system scope) before the barrier, so whatever the
// flags' writers released is visible to every thread after it. A timeout is
// the library's one (remote/timed_wait.cuh): the record names it and the CTA
// returns false.
template <class FlagOf>
__device__ __forceinline__ bool wait_flags_geq(int count, FlagOf flag_of, uint64_t expected, uint64_t timeout_ns,
                                               remote::FlagTimeoutRecord* record) {
  bool ok = true;
  const remote::WaitBudget budget = remote::start_wait(timeout_ns, record);
  for (int g = int(threadIdx.x); ok && g < count; g += int(blockDim.x)) {
    int rank = 0, index = 0;
    const uint64_t* flag = flag_of(g, rank, index);
    ok = remote::wait_geq([flag] { return ptx::ld_relaxed_sys_u64(flag); }, ptx::ld_relaxed_sys_u64(flag), expected,
                          budget, rank, index);
  }
  ptx::fence_acq_rel_sys();
  return __syncthreads_and(ok) != 0;
}

// A wait kernel earlier in the stream (launch_moe_wait_flags) timed out on
// this record: what it waited for never came, and the kernels after it
// leave their outputs as they were (the host reports the record).

__device__ __forceinline__ bool any_wait_failed(const remote::FlagTimeoutRecord* r, int n) {
  for (int i = 0; i < n; ++i)
    if (remote::wait_given_up(r + i)) return true;
  return false;
}

// a[0 .. n) := exclusive prefix sums, a[n] := the total (a holds n + 1
// entries). Every thread of the CTA calls it; blockDim.x a multiple of 32,
// at most 1024. Shared memory `warp_tot` holds 32 ints. load(a + i) reads an
// entry (each is read once, by the thread that then writes it).
template <class Load>
__device__ __forceinline__ void cta_exclusive_scan(int32_t* a, int n, int32_t* warp_tot, Load load) {
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5, warps = int(blockDim.x) >> 5;
  int32_t carry = 0;
  for (int c0 = 0; c0 < n; c0 += int(blockDim.x)) {
    const int i = c0 + tid;
    const int32_t v = i < n ? load(a + i) : 0;
    int32_t x = v;  // inclusive scan within the warp
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int32_t y = __shfl_up_sync(~0u, x, d);
      if (lane >= d) x += y;
    }
    if (lane == 31) warp_tot[warp] = x;
    __syncthreads();
    int32_t before = carry, chunk = 0;
    for (int w = 0; w < warps; ++w) {
      before += w < warp ? warp_tot[w] : 0;
      chunk += warp_tot[w];
    }
    if (i < n) a[i] = before + x - v;
    carry += chunk;
    __syncthreads();  // warp_tot is rewritten by the next chunk
  }
  if (tid == 0) a[n] = carry;
  __syncthreads();
}

}  // namespace xstage::moe
