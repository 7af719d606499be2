#pragma once
// Thread-block clusters (sm_90): the CTA's rank in its cluster, the
// cluster-wide barrier, arrivals on a peer CTA's mbarrier, and TMA loads
// multicast into every CTA of a mask. Shared-memory addresses of a peer are
// this CTA's offsets mapped with mapa: the same variable in the peer.
#include <cstdint>

#include <cuda.h>

#include "device/ptx/bulk_copy.cuh"  // smem_addr

namespace xstage::ptx {

__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// Every thread of every CTA of the cluster (all of a warp together): release
// what came before, acquire what the others did before theirs.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// One arrival on the mbarrier at this CTA's offset `bar` in CTA `cta` of the
// cluster (itself included), with release at cluster scope: this thread's
// earlier reads of shared memory (done, e.g. by a completed wgmma) are
// ordered before whatever the barrier's waiter does next.
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t cta) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}\n" ::"r"(smem_addr(bar)),
      "r"(cta)
      : "memory");
}

// 2-D box load multicast into every CTA of `cta_mask`: the box lands at this
// CTA's offset `smem_dst` in each of them, and each one's mbarrier at offset
// `bar` receives the bytes (complete_tx).
__device__ __forceinline__ void tma_load_2d_multicast(void* smem_dst, const CUtensorMap* map, uint64_t* bar, int c0,
                                                      int c1, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
      "[%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
}

}  // namespace xstage::ptx
