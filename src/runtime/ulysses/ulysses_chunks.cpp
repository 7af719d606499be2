// Head chunks of the pipelined variant (include/xstage/ulysses_chunks.hpp). CPU only.
#include "xstage/ulysses_chunks.hpp"

#include <fmt/format.h>

#include "xstage/error.hpp"

namespace xstage {

std::vector<HeadRange> ulysses_head_chunks(int64_t heads_per_rank, int chunks) {
  if (heads_per_rank < 1) throw Error(fmt::format("pipelined: {} heads a rank: expected >= 1", heads_per_rank));
  if (chunks < 1 || chunks > heads_per_rank)
    throw Error(fmt::format("pipelined: {} head chunks of {} heads a rank: expected 1 .. {} (a chunk holds at least "
                            "one head)",
                            chunks, heads_per_rank, heads_per_rank));
  std::vector<HeadRange> out;
  for (int k = 0; k < chunks; ++k)
    out.push_back({heads_per_rank * k / chunks, heads_per_rank * (k + 1) / chunks});
  return out;
}

std::vector<int> ulysses_chunk_sweep(int64_t heads_per_rank) {
  if (heads_per_rank < 1) throw Error(fmt::format("pipelined: {} heads a rank: expected >= 1", heads_per_rank));
  std::vector<int> out;
  for (int64_t n = 2; n < heads_per_rank; n *= 2) out.push_back(int(n));
  out.push_back(int(heads_per_rank));
  return out;
}

std::vector<BlockCopy> ulysses_chunk_blocks(const UlyssesLayout& l, HeadRange h) {
  if (h.begin < 0 || h.size() < 1 || h.end > l.heads_per_rank())
    throw Error(fmt::format("pipelined: heads [{}, {}): expected a non-empty range within the {} heads of a rank",
                            h.begin, h.end, l.heads_per_rank()));
  std::vector<BlockCopy> out = l.blocks(A2aDirection::heads_to_seq);
  const size_t shift = size_t(h.begin) * l.row_bytes();
  for (BlockCopy& b : out) {
    b.width = size_t(h.size()) * l.row_bytes();
    b.src_offset += shift;
    b.dst_offset += shift;
  }
  return out;
}

size_t ulysses_chunk_stage_offset(const UlyssesLayout& l, HeadRange h) {
  return size_t(l.shape().P) * size_t(l.shape().B) * size_t(l.chunk_rows()) * size_t(h.begin) * l.row_bytes();
}

size_t ulysses_chunk_slot_bytes(const UlyssesLayout& l, HeadRange h) {
  return size_t(l.shape().B) * size_t(l.chunk_rows()) * size_t(h.size()) * l.row_bytes();
}

namespace {
// Pack (the rank sends) or unpack (the rank receives): the chunk's blocks of
// `rank`, the stage side moved to slot (peer) of the chunk's region, packed
// densely in block order.
std::vector<BlockCopy> stage_blocks(const UlyssesLayout& l, HeadRange h, int rank, bool pack) {
  const size_t base = ulysses_chunk_stage_offset(l, h), slot = ulysses_chunk_slot_bytes(l, h);
  std::vector<size_t> filled(size_t(l.shape().P), 0);
  std::vector<BlockCopy> out;
  for (const BlockCopy& blk : ulysses_chunk_blocks(l, h)) {
    if ((pack ? blk.src_rank : blk.dst_rank) != rank) continue;
    const int peer = pack ? blk.dst_rank : blk.src_rank;
    BlockCopy s = blk;
    const size_t at = base + size_t(peer) * slot + filled[size_t(peer)];
    if (pack) {
      s.dst_rank = rank, s.dst_offset = at, s.dst_pitch = blk.width;
    } else {
      s.src_rank = rank, s.src_offset = at, s.src_pitch = blk.width;
    }
    filled[size_t(peer)] += blk.bytes();
    out.push_back(s);
  }
  return out;
}
}  // namespace

std::vector<BlockCopy> ulysses_chunk_pack_blocks(const UlyssesLayout& l, HeadRange h, int rank) {
  return stage_blocks(l, h, rank, true);
}

std::vector<BlockCopy> ulysses_chunk_unpack_blocks(const UlyssesLayout& l, HeadRange h, int rank) {
  return stage_blocks(l, h, rank, false);
}

}  // namespace xstage
