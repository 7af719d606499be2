#pragma once
// The destination map: what the remote-store layer asks of a client (the
// Ulysses all-to-all: ulysses/destination.cuh; the MoE combine next). The
// layer sends a tile's staged output rows to other ranks, publishes release
// flags and waits on them; the client says where each row goes. A
// destination type Dest has only static members:
//   using Params     the kernel's parameter block (by value); besides the
//                    client's geometry it holds the members the layer reads:
//                    flags (a [P] table of flag arrays), epoch (the value
//                    this run's flags are set to), paced_min_rows, and the
//                    receiver fields receive, recv_ranks, recv_epoch, timeout_ns,
//                    timeout_record (and experiment, trace for diagnostics)
//   using Tile       the kernel's tile coordinates
//   first_row(c, block_m)            the tile's first row
//   tile_rows(p, m0, block_m)        rows of the tile that exist
//   destinations(p, m0, rows)        the ranks rows [m0, m0 + rows) go to
//   row_address(p, c, row, D)        where a row goes (element pointer)
//   row_run(p, c, row0, rows, D)     the run of rows from row0 that share a
//                                    destination (one address computation
//                                    for many rows)
//   first_row_in(p, d, m0)           the tile's first row owned by rank d
//   using FlagKey, flag_key(p, c)    what locates tile c's flags, worked out
//                                    once a tile
//   flag(p, d, key)                  the tile's flag in rank d's array
//   struct ReceiverFlags             the flags a receiver waits for:
//     ReceiverFlags(p), total(), locate(g, d, k) -> whether slot g (rank d,
//     index k of its array) is one to wait for
#include <cstdint>

namespace xstage::remote {

// Consecutive rows from row0 (of one tile or one warp): the first `run` of
// them go to row0's destination at base + r * pitch; the others (a run that
// straddles a shard boundary) need row_address. One division for the run
// instead of one for every 16-byte chunk.
struct RowRun {
  uint16_t* base;
  int64_t pitch;  // elements between consecutive rows of a destination shard
  int run;
  __device__ __forceinline__ bool covers(int r) const { return r < run; }
};

// The address of staged row r (relative to row0) of tile c.
template <class Dest, int D>
__device__ __forceinline__ uint16_t* row_in_run(const typename Dest::Params& p, const typename Dest::Tile& c,
                                                const RowRun& dst, int64_t row0, int r) {
  return dst.covers(r) ? dst.base + int64_t(r) * dst.pitch : Dest::row_address(p, c, row0 + r, D);
}

}  // namespace xstage::remote
