#pragma once
// Which flags a fused Ulysses kernel's receiver wait reads, and how its
// threads split them (ulysses_wait.cuh). Host and device: a CPU test walks
// every thread's share and checks each flag is read exactly once.
#include <cstdint>

#include "device/attention/ulysses_params.hpp"
#include "device/host_device.hpp"

namespace xstage::attention {

// The flags one receiver rank waits for, flattened: k -> (stream, m-block)
// with stream = (src, b, h), in 32 bits (a rank's flag count fits in 31:
// the host checks S).
struct ReceiverFlags {
  int first_m_block = 0, span = 0, count = 0;  // count = streams * span; 0: an empty shard
  XSTAGE_HD int index(int m_blocks, int k) const { return (k / span) * m_blocks + first_m_block + k % span; }
};

XSTAGE_HD inline ReceiverFlags receiver_flags(const UlyssesStoreParams& p, int d) {
  const RankRange mb = ulysses_receiver_m_blocks(d, p.block_m, p.S, p.chunk);
  const int span = mb.last - mb.first + 1;
  if (span <= 0) return {};
  return {mb.first, span, p.P * p.batch * p.heads_per_rank * span};
}

// A thread's walk over the flags it waits for: flat indices tid, tid +
// threads, ... over the flags of ranks [first, first + n) laid rank after rank.
struct ReceiverFlagCursor {
  int d, d_end, k;  // rank, end of the ranks, index into rank d's flags
  ReceiverFlags rf;

  XSTAGE_HD static ReceiverFlagCursor start(const UlyssesStoreParams& p, int first, int n, int tid) {
    return {first, first + n, tid, n > 0 ? receiver_flags(p, first) : ReceiverFlags{}};
  }
  // The next flag: false past the last rank, else its rank and index.
  XSTAGE_HD bool next(const UlyssesStoreParams& p, int threads, int& rank, int& idx) {
    while (d < d_end && k >= rf.count) {  // past rank d: the rest is an offset into the next
      k -= rf.count;
      if (++d < d_end) rf = receiver_flags(p, d);
    }
    if (d >= d_end) return false;
    rank = d, idx = rf.index(p.m_blocks, k);
    k += threads;
    return true;
  }
};

}  // namespace xstage::attention
