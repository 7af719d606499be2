#pragma once
// ldmatrix (sm_75+): a warp loads 8x8 matrices of 16-bit elements from shared
// memory into the register layout of mma.sync fragments. Lanes 8i..8i+7 give
// the addresses of the 8 rows (16 bytes each, 16-byte aligned) of matrix i;
// register i of every lane receives its slice of matrix i: (row lane/4,
// columns 2*(lane%4), +1) without .trans, the transpose with .trans.
#include <cstdint>

#include "device/ptx/bulk_copy.cuh"  // smem_addr

namespace xstage::ptx {

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* srow) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(srow)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* srow) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(srow)));
}

}  // namespace xstage::ptx
