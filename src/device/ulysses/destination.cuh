#pragma once
// The Ulysses all-to-all as a destination map of the remote-store layer
// (remote/destination.cuh): an attention output row (batch b, head h of
// source rank src, sequence position row) goes to the rank that owns the
// row's sequence position, at the source's head offset, in the
// sequence-sharded layout [batch, S_d, H, D] (ulysses/params.hpp).
#include <cstdint>

#include "device/sched/attention_tile.hpp"
#include "device/remote/destination.cuh"
#include "device/remote/seq_shard_rows.cuh"
#include "device/ulysses/params.hpp"

namespace xstage::ulysses {

struct UlyssesDestination {
  using Params = UlyssesStoreParams;
  using Tile = sched::TileCoord;

  // The rank that owns a row (in 32 bits: seq_shard_rows.cuh says why).
  __device__ __forceinline__ static int owner_of_row(const Params& p, int64_t row) {
    return int(uint32_t(row) / uint32_t(p.chunk));
  }

  __device__ __forceinline__ static int64_t first_row(const Tile& c, int block_m) {
    return int64_t(c.m_block) * block_m;
  }
  __device__ __forceinline__ static int tile_rows(const Params& p, int64_t m0, int block_m) {
    return int(m0 + block_m < p.S ? block_m : p.S - m0);
  }

  // The ranks rows [m0, min(m0 + rows, S)) go to (ulysses_tile_destinations, in 32 bits).
  __device__ __forceinline__ static RankRange destinations(const Params& p, int64_t m0, int rows) {
    const int64_t last_row = (m0 + rows < p.S ? m0 + rows : p.S) - 1;
    return {owner_of_row(p, m0), owner_of_row(p, last_row)};
  }

  // Tile c's rows: its (source rank, b) stream's rows in the sequence
  // layout [batch, S_d, H, D] of their owners, at the column slice of its
  // global head.
  __device__ __forceinline__ static remote::SeqShardRows rows(const Params& p, const Tile& c) {
    const int src = p.rank_base + c.b / p.batch, b = c.b % p.batch;
    const int64_t H_total = int64_t(p.P) * p.heads_per_rank;
    const int64_t hg = int64_t(src) * p.heads_per_rank + c.h;
    return {p.out, p.S, p.chunk, b, H_total * p.head_dim, hg * p.head_dim};
  }

  __device__ __forceinline__ static int64_t first_row_in(const Params& p, int d, int64_t m0) {
    return int64_t(d) * p.chunk > m0 ? int64_t(d) * p.chunk : m0;
  }

  // A tile's flags: its stream (source rank, b, head) and m-block.
  struct FlagKey {
    int64_t stream = 0;
    int m_block = 0;
  };
  __device__ __forceinline__ static FlagKey flag_key(const Params& p, const Tile& c) {
    return {ulysses_stream_index(p.rank_base + c.b / p.batch, c.b % p.batch, c.h, p.batch, p.heads_per_rank),
            c.m_block};
  }
  __device__ __forceinline__ static uint64_t* flag(const Params& p, int d, const FlagKey& k) {
    return p.flags[d] + ulysses_flag_index(k.stream, k.m_block, d, p.block_m, p.chunk, p.flag_stride);
  }

  // The flags of the receivers [p.recv_rank_first, + p.recv_ranks): their
  // slots laid rank after rank. Index arithmetic in 32 bits, no 64-bit
  // division (perf-log f9): the host checks that S and every rank's slot
  // count fit.
  struct ReceiverFlags {
    int first, stride, per_rank, total_, chunk, S, block_m;
    __device__ __forceinline__ explicit ReceiverFlags(const Params& p)
        : first(p.recv_rank_first),
          stride(p.flag_stride),
          per_rank(p.P * p.batch * p.heads_per_rank * p.flag_stride),
          total_(p.recv_ranks * p.P * p.batch * p.heads_per_rank * p.flag_stride),
          chunk(int(p.chunk)),
          S(int(p.S)),
          block_m(p.block_m) {}
    __device__ __forceinline__ int total() const { return total_; }
    // Slot g: rank first + g / per_rank, slot k = g % per_rank of its array;
    // a flag to wait for while k % stride < the rank's m-block span.
    __device__ __forceinline__ bool locate(int g, int& d, int& k) const {
      const int r = g / per_rank;
      d = first + r, k = g - r * per_rank;
      const int begin = d * chunk, end = min(begin + chunk, S);
      const int span = end > begin ? (end - 1) / block_m - begin / block_m + 1 : 0;
      return k % stride < span;
    }
  };
};

}  // namespace xstage::ulysses
