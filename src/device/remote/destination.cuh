#pragma once
// The one destination contract of the remote-store layer: where a kernel's
// output rows go, and which flags say they are there.
//
// Rows: a *row view* names, for an absolute row r, the address of its first
// element on the rank that holds it: row(r); and, for consecutive rows that
// share a destination, a run (row_run.hpp): run(row0, n). A tile that owns
// a column slice of the rows adds its first column to row(r) (the GEMM
// stores do: gemm/epilogue_stores.cuh), or the view carries the slice (col0).
// Two views exist, one interface:
//   RowTable      (row_table.cuh) rows given one by one by tables on the
//                 device: the MoE layer's dispatch sources and combine rows;
//                 no runs (each row is looked up);
//   SeqShardRows  (seq_shard_rows.cuh) rows sharded by position over the
//                 ranks: the Ulysses layout, a head's column slice of each row.
//
// Flags: per (tile, destination rank), released after the tile's rows
// (publish.cuh: publish_tile and the Completion modes) and awaited by
// receivers (receive.cuh); or per launch or row block, one flag a rank
// (publish_flags: the MoE layer's counts and done flags).
//
// A kernel whose tiles send staged rows through the layer's epilogues
// (epilogue_store.cuh, the paced ones) names its destination by a type Dest
// with only static members:
//   using Params     the kernel's parameter block (by value); besides the
//                    client's geometry it holds the members the layer reads:
//                    flags (a [P] table of flag arrays), epoch (the value
//                    this run's flags are set to), paced_min_rows, and the
//                    receiver fields receive, recv_ranks, recv_epoch, timeout_ns,
//                    timeout_record (and experiment, trace for diagnostics)
//   using Tile       the kernel's tile coordinates
//   rows(p, c)                       tile c's row view
//   first_row(c, block_m)            the tile's first row
//   tile_rows(p, m0, block_m)        rows of the tile that exist
//   destinations(p, m0, rows)        the ranks rows [m0, m0 + rows) go to
//   first_row_in(p, d, m0)           the tile's first row owned by rank d
//   using FlagKey, flag_key(p, c)    what locates tile c's flags, worked out
//                                    once a tile
//   flag(p, d, key)                  the tile's flag in rank d's array
//   struct ReceiverFlags             the flags a receiver waits for:
//     ReceiverFlags(p), total(), locate(g, d, k) -> whether slot g (rank d,
//     index k of its array) is one to wait for
#include <cstdint>

#include "device/remote/row_run.hpp"

namespace xstage::remote {

// The address of row row0 + r of tile c, from the run worked out for row0
// when the run covers r.
template <class Dest>
__device__ __forceinline__ uint16_t* row_in_run(const typename Dest::Params& p, const typename Dest::Tile& c,
                                                const RowRun& dst, int64_t row0, int r) {
  return dst.covers(r) ? dst.base + int64_t(r) * dst.pitch : Dest::rows(p, c).row(row0 + r);
}

}  // namespace xstage::remote
