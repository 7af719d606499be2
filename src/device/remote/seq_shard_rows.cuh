#pragma once
// Destinations given by a layout: rows sharded by position over the ranks in
// chunks of `chunk` rows (the last shards shorter, possibly empty, as
// torch.chunk leaves them). Global row r lives on rank d = r / chunk, at row
// r - d * chunk of that rank's shard, whose buffer holds `batch` shards of
// S_d rows one after the other ([batch, S_d, ...]). The Ulysses sequence
// layout is one: an attention output row of head h goes to its sequence
// owner at the column slice of h. A row view like remote/row_table.cuh's
// RowTable, computed instead of looked up (remote/destination.cuh).
#include <cstdint>

#include "device/host_device.hpp"
#include "device/remote/row_run.hpp"

namespace xstage::remote {

struct SeqShardRows {
  void* const* bases;  // [P] each rank's buffer (this rank's view of it)
  int64_t S;           // global rows
  int64_t chunk;       // rows a shard (all but the last ones)
  int64_t batch;       // which of the `batch` shards in each buffer: b
  int64_t pitch;       // elements between consecutive rows of a shard
  int64_t col0;        // the view's first column: its slice of each row

  // Rows and chunks fit in 31 bits (the host checks S): a 32-bit division
  // is a few instructions, the 64-bit one a long software routine on the
  // epilogue's critical path (perf-log f7).
  XSTAGE_HD int rank(int64_t r) const { return int(uint32_t(r) / uint32_t(chunk)); }
  // Rows of rank d's shard.
  XSTAGE_HD int64_t shard_rows(int d) const {
    const int64_t begin = int64_t(d) * chunk, end = begin + chunk < S ? begin + chunk : S;
    return end - begin;
  }
  // Row r's first element of the view's slice, on its rank.
  XSTAGE_HD uint16_t* row(int64_t r) const {
    const int d = rank(r);
    const int64_t local = r - int64_t(d) * chunk;
    return static_cast<uint16_t*>(bases[d]) + (batch * shard_rows(d) + local) * pitch + col0;
  }
  // The run of rows from row0 (at most n) on row0's rank: one division for
  // them all. Rows from S on are not stored (a sequence's last tile).
  XSTAGE_HD RowRun run(int64_t row0, int n) const {
    if (row0 >= S) return {nullptr, 0, 0};
    const int d = rank(row0);
    const int64_t left = shard_rows(d) - (row0 - int64_t(d) * chunk);
    return {row(row0), pitch, int(left < n ? left : n)};
  }
};

}  // namespace xstage::remote
