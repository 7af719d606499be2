#pragma once
// Plain parameter blocks of the fused Ulysses attention (attention with the
// post-attention all-to-all in its epilogue), shared by the .cu launch files
// and host C++.
//
// One launch covers `n_ranks` consecutive ranks starting at `rank_base` (all
// P ranks when they are emulated on one GPU, one rank otherwise): the
// mainloop's batch index is b' = (rank - rank_base) * batch + b, and every
// rank's head-sharded Q, K, V are [batch, S, H/P, D] shards laid one after
// another. Output rows go to the sequence-sharded layout of
// include/xstage/ulysses_layout.hpp: rank d owns global rows
// [d*chunk, min(S, (d+1)*chunk)) as [batch, S_d, H, D].
#include <cstdint>

#include "device/host_device.hpp"
#include "device/remote/flag_timeout_record.hpp"
#include "device/remote/rank_range.hpp"

namespace xstage::ulysses {

using remote::RankRange;

// The Ulysses destination map's parameters, with the members the
// remote-store layer reads (remote/destination.cuh).
struct UlyssesStoreParams {
  void* const* out = nullptr;        // [P] device table: rank d's sequence-sharded output (bf16)
  uint64_t* const* flags = nullptr;  // [P] device table: rank d's completion flags
  int P = 1;
  int rank_base = 0;       // rank of the launch's first batch block
  int batch = 1;           // B of the problem (the launch runs n_ranks * batch)
  int heads_per_rank = 1;  // H/P; the launch's H
  int head_dim = 0;        // D
  int64_t S = 0;           // global sequence length (the launch's S_q and S_kv)
  int64_t chunk = 0;       // ceil(S / P)
  int flag_stride = 0;     // a stream's slots in a destination's flag array (ulysses_flag_stride)
  uint64_t epoch = 0;      // value the flags of this run are set to (runs count up)
  int paced_min_rows = 8;  // paced paths: a send waits until this many rows are due (the last one excepted)
  // The receiver wait at the kernel's end (remote/receive.cuh): whether the
  // kernel waits (0: no receiver side in it), the ranks whose flags it waits
  // for, and how long the wait may take (it starts while the other CTAs
  // compute their last tiles).
  int receive = 0;
  remote::FlagTimeoutRecord* timeout_record = nullptr;  // where a timed-out wait says what it waited for
  int recv_rank_first = 0, recv_ranks = 0;
  int block_m = 128;  // the kernel's BLOCK_M: the m-blocks a receiver waits for
  uint64_t timeout_ns = 0;
  uint64_t recv_epoch = 0;  // what the receivers wait for: epoch (tests: a later one, to time out)
  // Diagnostics (remote/diagnostics.hpp): kDiag* bits, and where kDiagTrace
  // and kDiagTileTrace write. Only a build that compiles them in carries
  // them; the production block holds constants instead (no storage, nothing
  // to set), so that the remote layer's diagnostic reads fold away.
#ifdef XSTAGE_DIAGNOSTICS
  unsigned int experiment = 0;
  unsigned long long* trace = nullptr;
#else
  static constexpr unsigned int experiment = 0;
  static constexpr unsigned long long* trace = nullptr;
#endif
};

// Destination d's flag array: stream after stream (src, b, h), each with
// flag_stride slots, one per m-block overlapping d's rows from d's first
// (flag_stride: the most m-blocks a shard overlaps). The array holds only
// flags d reads, contiguous but for each stream's unused last slots, so a
// receiver's warp reads its flags in a few lines a load.
XSTAGE_HD inline int ulysses_flag_stride(int64_t chunk, int block_m) {
  return int((chunk + block_m - 1) / block_m) + 1;
}
XSTAGE_HD inline int64_t ulysses_stream_index(int src, int b, int h, int batch, int heads_per_rank) {
  return (int64_t(src) * batch + b) * heads_per_rank + h;
}
// The flag of (stream, m-block) in destination d's array; m_block overlaps d's rows.
// d * chunk < S < 2^31 (the host checks S): a 32-bit division, not the long
// 64-bit routine (it runs at the fused kernel's very end, perf-log f10).
XSTAGE_HD inline int64_t ulysses_flag_index(int64_t stream, int m_block, int d, int block_m, int64_t chunk,
                                            int flag_stride) {
  const int first = int(uint32_t(d) * uint32_t(chunk) / uint32_t(block_m));  // d's first m-block
  return stream * flag_stride + (m_block - first);
}

// The ranks a tile's rows go to: rows [m0, min(m0 + block_m, S)) belong to
// ranks first..last (several when a shard is shorter than a tile).
XSTAGE_HD inline RankRange ulysses_tile_destinations(int64_t m0, int block_m, int64_t S, int64_t chunk) {
  const int64_t last_row = (m0 + block_m < S ? m0 + block_m : S) - 1;
  return {int(m0 / chunk), int(last_row / chunk)};
}

// The m-blocks whose flags rank d waits for: those overlapping its rows
// [d chunk, min(S, (d + 1) chunk)); first > last for a rank with no rows.
XSTAGE_HD inline RankRange ulysses_receiver_m_blocks(int d, int block_m, int64_t S, int64_t chunk) {
  const int64_t begin = int64_t(d) * chunk;
  const int64_t end = begin + chunk < S ? begin + chunk : S;
  if (end <= begin) return {0, -1};
  return {int(begin / block_m), int((end - 1) / block_m)};
}

}  // namespace xstage::ulysses
