#pragma once
// Host side: the TMA maps of the GEMM operands. A matrix of `rows` rows of K
// elements (K contiguous) is a 2-D tensor (K, rows) read in boxes of one
// k-block (a 128-byte swizzle row) by box_rows rows: the A rows of a tile,
// or its B rows (B^T stored row-major, as the experts' weights are).
// Out of bounds the TMA unit zero-fills a load and drops a store's elements:
// columns K .. of the last k-block read as 0 (K need only be a multiple of 8,
// the 16-byte row pitch a map needs), and a box reaching past `rows` reads 0
// there. Bounds are the map's only: where several matrices share one map
// (the experts' B as E N rows), a box past one matrix's last row reads the
// next one's first rows; the clients say why that is harmless for them.
#include <cstdint>

#include "device/ptx/tma.cuh"

namespace xstage::gemm {

template <class Elem>
int encode_rows_k(CUtensorMap* map, const void* base, int K, int64_t rows, int box_rows) {
  const uint64_t dims[2] = {uint64_t(K), uint64_t(rows)};
  const uint64_t strides[1] = {uint64_t(K) * Elem::kBytes};
  const uint32_t box[2] = {uint32_t(Elem::kBlockK), uint32_t(box_rows)};
  return ptx::encode_tensor_map_sw128(map, Elem::kTmaType, base, 2, dims, strides, box);
}

}  // namespace xstage::gemm
