#pragma once
// Thread-block clusters (sm_90): the CTA's rank in its cluster, the
// cluster-wide barrier, arrivals on a peer CTA's mbarrier, and TMA loads
// multicast into several CTAs of the cluster. A peer's shared-memory address
// is this CTA's offset mapped with mapa: the same variable in the peer.
#include <cstdint>

#include <cuda.h>

#include "device/ptx/bulk_copy.cuh"  // smem_addr

namespace xstage::ptx {

__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// Every thread of every CTA of the cluster (whole warps): what each did
// before is visible to all after (release, then acquire).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// One arrival on the mbarrier at this CTA's offset `bar` in CTA `cta` of the
// cluster (this one included). The release is the default CTA scope: the
// arrival hands back a ring slot whose reads (a completed wgmma's) are done,
// and a release at cluster scope would fence every outstanding memory
// operation of the warp at each k-block (docs/perf-log.md, MoE 6).
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t cta) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(smem_addr(bar)),
      "r"(cta)
      : "memory");
}

// 2-D box load multicast into every CTA of `cta_mask`: the box lands at this
// CTA's offset `smem_dst` in each of them, and each one's mbarrier at offset
// `bar` counts the bytes (complete_tx). A peer's bytes may land before the
// peer announced them (expect_tx): the barrier's transaction count goes
// below zero meanwhile, and its phase still waits for the announcing arrival.
__device__ __forceinline__ void tma_load_2d_multicast(void* smem_dst, const CUtensorMap* map, uint64_t* bar, int c0,
                                                      int c1, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
      "[%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
}

}  // namespace xstage::ptx
