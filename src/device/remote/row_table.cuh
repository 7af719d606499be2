#pragma once
// Destinations (and sources) given row by row: local row r lives on rank
// rank_of[r], at row slot_of[r] of that rank's buffer. The expert-parallel
// MoE layer's rows are such: a dispatched token row comes from the send
// buffer of the rank that owns the token, an L2 output row goes to that
// rank's combine buffer, and which ones is routing data on the device.
//
// The rank's buffers are plain pointers ([P], this rank's view: peer,
// host-mapped or local), so a kernel never knows which backend made them. A
// row view of remote/destination.cuh: a GEMM tile that owns a column slice
// of the rows adds its first column to row(r), as the GEMM's stores do
// (gemm/epilogue_stores.cuh: a RowTable is one of its Rows).
#include <cstdint>

#include "device/remote/row_run.hpp"

namespace xstage::remote {

struct RowTable {
  void* const* bases = nullptr;       // [P] each rank's buffer, bf16 rows of `pitch` elements
  const int32_t* rank_of = nullptr;   // [rows] the rank that holds row r
  const int32_t* slot_of = nullptr;   // [rows] its row there (taken modulo slot_mod when that is > 0)
  int64_t pitch = 0;
  int slot_mod = 0;

  __device__ __forceinline__ int rank(int r) const { return __ldg(rank_of + r); }
  __device__ __forceinline__ int64_t slot(int r) const {
    const int s = __ldg(slot_of + r);
    return slot_mod > 0 ? s % slot_mod : s;
  }
  // Row r's first element on its rank.
  __device__ __forceinline__ uint16_t* row(int r) const {
    return static_cast<uint16_t*>(bases[rank(r)]) + slot(r) * pitch;
  }
  // Rows looked up one by one share no run.
  __device__ __forceinline__ RowRun run(int64_t, int) const { return {nullptr, 0, 0}; }
};

// Row `slot` of rank `rank`'s buffer, where a kernel already knows both
// (the unfused dispatch's pull, which reads them from the route).
__device__ __forceinline__ const uint16_t* source_row(const void* const* bases, int rank, int64_t slot,
                                                      int64_t pitch) {
  return static_cast<const uint16_t*>(bases[rank]) + slot * pitch;
}

}  // namespace xstage::remote
