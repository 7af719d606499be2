#pragma once
// Chunks of the pipelined Ulysses variant (include/xstage/ulysses/ulysses.hpp): each
// rank's H/P heads split into consecutive head ranges and the sequence into
// row ranges (query rows: attention over a row range reads every key, so
// row chunks are as independent as head chunks); attention runs one chunk at
// a time, and each chunk's part of the post-attention all-to-all
// (heads_to_seq) is sent while the next chunk computes. Row chunks are what
// keep the sends large and few: a row range inside one rank's sequence shard
// goes to that rank alone, one 2-D copy from each source, where a head chunk
// sends a narrow block to every rank. Here the chunks and that all-to-all
// narrowed to one chunk, as block copies, direct or through NCCL's equal
// slots (head chunks only). CPU only.
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "xstage/ulysses/ulysses_layout.hpp"

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

// Query rows [begin, end) of the global sequence.
struct RowRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// Row chunk k of n starts at k S / n rounded to a multiple of `align` rows
// (the attention kernel's BLOCK_M, so that no query tile straddles two
// chunks); ranges that the rounding leaves empty are dropped, so fewer than n
// may come back when S is short. Throws xstage::Error unless S >= 1,
// align >= 1 and 1 <= chunks <= kMaxPipelineChunks.
std::vector<RowRange> ulysses_row_chunks(int64_t S, int chunks, int64_t align);

// One chunk of the pipeline: its heads of every rank and its query rows.
struct PipelineChunk {
  HeadRange heads;
  RowRange rows;
};

// At most this many chunks in one pipeline (head chunks x row chunks): each
// is an attention launch and its sends, and the sweeps stop at 32.
inline constexpr int kMaxPipelineChunks = 256;

// The chunks in the order they run: row chunk after row chunk, the head
// chunks of each in turn (so that a row chunk's rows are complete, for every
// head, as early as possible). Throws xstage::Error for counts out of range
// or more than kMaxPipelineChunks chunks in all.
std::vector<PipelineChunk> ulysses_pipeline_chunks(int64_t heads_per_rank, int head_chunks, int64_t S,
                                                   int row_chunks, int64_t align);

// (head chunks, row chunks) pairs a sweep tries when none are given: head
// chunks from ulysses_chunk_sweep plus 1, row chunks 1, 2, 4, ... with at
// most `max_chunks` chunks in all, and only row counts that still give
// distinct ranges at this S (ulysses_row_chunks).
std::vector<std::pair<int, int>> ulysses_pipeline_sweep(int64_t heads_per_rank, int64_t S, int64_t align,
                                                        int max_chunks = 32);

// The split a pipelined run takes when it names none, from what the chunk
// sweeps showed (docs/RESULTS.md section 8, results/h200/ulysses/
// pipeline-vs-torch/): `comm_over_compute` is the all-to-all's time at the
// path's rate over the attention's; `tiles_per_wave` the tiles the GPU runs
// at once; `batches_per_launch` the (rank, batch) pairs one attention launch
// covers.
//   under 0.03: (1, 1): nothing worth hiding; chunks only add launches and
//     tile-wave remainders (device memory, 4k-32k: within 1-3% of the best);
//   1 or more (the link is the bottleneck): whole heads (1 head chunk),
//     whose sends stay contiguous, in as many row chunks as keep a chunk at
//     0.7 of a wave of tiles or more (host 4k: 1 x 8);
//   between: one head a chunk (head chunks = H/P, at most 32) and row chunks
//     by the same wave rule (host 8k-32k: 3 x 4, 3 x 8).
// Never more than 32 chunks in all.
std::pair<int, int> ulysses_default_split(int64_t heads_per_rank, int64_t S, int64_t block_m, int batches_per_launch,
                                          int tiles_per_wave, double comm_over_compute);

// The chunk counts a sweep tries when none are given: 2, 4, 8, ... below the
// heads per rank, and the heads per rank itself (one head a chunk); {1} when
// a rank has one head.
std::vector<int> ulysses_chunk_sweep(int64_t heads_per_rank);

// The heads_to_seq all-to-all of heads `h` only: UlyssesLayout::blocks
// narrowed to those heads (a block's row holds a source rank's heads
// contiguously on both sides, so narrowing shifts both offsets by h.begin
// heads and keeps the pitches).
std::vector<BlockCopy> ulysses_chunk_blocks(const UlyssesLayout& layout, HeadRange h);

// The same chunk's sends from a group's staged output: ranks [first, first +
// n) of one process write their attention output row by row across the
// group, [B, S, n, H/P, D] (element (b, s, r, h) at ((b S + s) n + r) H/P + h
// rows of D), which is the sequence-sharded layout's row when the group
// holds every rank. Offsets on the source side count from the group's
// buffer (src_rank = first). Where the group holds every rank (emulated
// ranks) each (destination, batch) is one 2-D copy of rows x ranks pieces,
// a contiguous one when the chunk has every head; else one a rank. With
// n = 1 the staged layout is the head-sharded one.
std::vector<BlockCopy> ulysses_staged_chunk_blocks(const UlyssesLayout& layout, const PipelineChunk& c, int first,
                                                   int n);

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
