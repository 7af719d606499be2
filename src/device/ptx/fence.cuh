#pragma once
// Memory fences by scope. fence.sc.sys (what __threadfence_system() emits)
// returns once this thread's earlier stores are visible system-wide: over PCIe
// or NVLink that is the drain of what this thread put in the X-Stage.

namespace xstage::ptx {

__device__ __forceinline__ void fence_sc_sys() { asm volatile("fence.sc.sys;" ::: "memory"); }
__device__ __forceinline__ void fence_acq_rel_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

}  // namespace xstage::ptx
