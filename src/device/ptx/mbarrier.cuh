#pragma once
// Shared-memory barriers (mbarrier, sm_80+; transaction counts sm_90). A
// barrier completes its current phase when the expected number of arrivals
// has arrived and, where a transaction count was announced (expect_tx), the
// announced bytes have landed (TMA copies report them with complete_tx). The
// phase then flips; waiters name the parity of the phase they wait for.
// Convention here: a fresh barrier is in phase 0; waiting for parity 1 on it
// returns at once ("the phase before"), so a producer's first wait on an
// empty slot with parity (round & 1) ^ 1 passes.
#include <cstdint>

#include "device/ptx/bulk_copy.cuh"  // smem_addr

namespace xstage::ptx {

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
}

// Makes barrier initialisation visible to the other threads and the async proxy
// (before the CTA barrier that follows the inits).
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(smem_addr(bar)) : "memory");
}

// One arrival plus an announcement of `bytes` transaction bytes still to land.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(
                   smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

// Spins until the phase of parity `parity` has completed (acquire, CTA scope).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// Named barriers (ids 1..15; 0 is __syncthreads). `threads` counts every
// thread that will sync or arrive, a multiple of 32.
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Register reallocation between warpgroups (sm_90a): every warp of a
// warpgroup executes the same one; the kernel needs a register cap at entry.
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS));
}

}  // namespace xstage::ptx
