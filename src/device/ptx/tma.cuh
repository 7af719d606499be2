#pragma once
// Tensor copies by the TMA unit (cp.async.bulk.tensor, sm_90): a box of a
// tensor described by a CUtensorMap lands in shared memory (swizzled as the
// map says) and reports its bytes to an mbarrier. Coordinates are element
// indices, innermost dimension first; parts of the box outside the tensor are
// filled with zeros (and still count as transaction bytes).
//
// Host side: encode_tensor_map_sw128() builds the map with the driver's
// cuTensorMapEncodeTiled, reached through the runtime's entry-point query, so
// nothing links libcuda. Include from .cu files only.
#include <cstdint>

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include "device/ptx/bulk_copy.cuh"  // smem_addr

namespace xstage::ptx {

__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// 4-D box load into shared memory (the destination 128-byte aligned, 1024 for
// the 128-byte swizzle), completion on `bar`.
__device__ __forceinline__ void tma_load_4d(void* smem_dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                            int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];" ::"r"(smem_addr(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// 2-D box load (a matrix of rows of contiguous elements), as tma_load_4d.
__device__ __forceinline__ void tma_load_2d(void* smem_dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], "
      "[%2];" ::"r"(smem_addr(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}

// 2-D box store from shared memory (laid out, and swizzled, as the map's box;
// 128-byte aligned, 1024 for the 128-byte swizzle) to global memory, in the
// issuing thread's bulk async-group (bulk_copy.cuh: commit, wait). Parts of
// the box outside the tensor are not written.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* smem_src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(smem_addr(smem_src)), "r"(c0), "r"(c1)
               : "memory");
}

// ---- host

// A tensor of `dtype` elements and `rank` dimensions (innermost first:
// dims[0] contiguous), strides in bytes of dimensions 1 .. rank-1 (multiples
// of 16), a box of box[i] elements, 128-byte swizzle (box[0] elements at most
// 128 bytes), zero fill out of bounds. Returns a cudaError_t as int:
// cudaErrorNotSupported when the driver has no cuTensorMapEncodeTiled,
// cudaErrorInvalidValue when it rejects the arguments.
inline int encode_tensor_map_sw128(CUtensorMap* out, CUtensorMapDataType dtype, const void* base, int rank,
                                   const uint64_t* dims, const uint64_t* strides_bytes, const uint32_t* box) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (encode == nullptr) return int(cudaErrorNotSupported);
  cuuint64_t gdim[5], gstride[4];
  cuuint32_t bdim[5], estride[5];
  for (int i = 0; i < rank; ++i) {
    gdim[i] = dims[i];
    bdim[i] = box[i];
    estride[i] = 1;
    if (i + 1 < rank) gstride[i] = strides_bytes[i];
  }
  const CUresult r = encode(out, dtype, cuuint32_t(rank), const_cast<void*>(base), gdim,
                            gstride, bdim, estride, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? 0 : int(cudaErrorInvalidValue);
}

}  // namespace xstage::ptx
