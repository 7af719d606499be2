#pragma once
// Head chunks of the pipelined Ulysses variant (include/xstage/ulysses.hpp):
// each rank's H/P heads are split into n chunks of consecutive heads;
// attention runs one chunk at a time, and each chunk's part of the
// post-attention all-to-all (heads_to_seq) is sent while the next chunk
// computes. Here the chunks and that all-to-all narrowed to one chunk, as
// block copies, direct or through NCCL's equal slots. CPU only.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "xstage/ulysses_layout.hpp"

namespace xstage {

// Heads [begin, end) of every rank's H/P (rank-local indices).
struct HeadRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// Chunk k of n holds heads [k Hl / n, (k + 1) Hl / n): remainders are spread,
// so sizes differ by at most one head. Throws xstage::Error unless
// 1 <= chunks <= heads_per_rank.
std::vector<HeadRange> ulysses_head_chunks(int64_t heads_per_rank, int chunks);

// The chunk counts a sweep tries when none are given: 2, 4, 8, ... below the
// heads per rank, and the heads per rank itself (one head a chunk); {1} when
// a rank has one head.
std::vector<int> ulysses_chunk_sweep(int64_t heads_per_rank);

// The heads_to_seq all-to-all of heads `h` only: UlyssesLayout::blocks
// narrowed to those heads (a block's row holds a source rank's heads
// contiguously on both sides, so narrowing shifts both offsets by h.begin
// heads and keeps the pitches).
std::vector<BlockCopy> ulysses_chunk_blocks(const UlyssesLayout& layout, HeadRange h);

// NCCL's all-to-all of one chunk: each chunk has its own region of the send
// and receive stages (nccl_stage_bytes in all, chunk after chunk), holding P
// slots of ulysses_chunk_slot_bytes (B * ceil(S/P) rows of the chunk's heads);
// slot j of rank r's send region lands in slot r of rank j's receive region.
// Pack copies rank r's head-sharded output into its send region, unpack its
// receive region into its sequence-sharded output; stage offsets count from
// the stage's start (src_rank == dst_rank == rank), the same block order on
// both sides so that the offsets agree.
size_t ulysses_chunk_stage_offset(const UlyssesLayout& layout, HeadRange h);
size_t ulysses_chunk_slot_bytes(const UlyssesLayout& layout, HeadRange h);
std::vector<BlockCopy> ulysses_chunk_pack_blocks(const UlyssesLayout& layout, HeadRange h, int rank);
std::vector<BlockCopy> ulysses_chunk_unpack_blocks(const UlyssesLayout& layout, HeadRange h, int rank);

}  // namespace xstage
