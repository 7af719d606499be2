// Head and row chunks of the pipelined variant (include/xstage/ulysses/ulysses_chunks.hpp). CPU only.
#include "xstage/ulysses/ulysses_chunks.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "xstage/core/error.hpp"

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

std::vector<RowRange> ulysses_row_chunks(int64_t S, int chunks, int64_t align) {
  if (S < 1 || align < 1)
    throw Error(fmt::format("pipelined: row chunks of S = {} rows aligned to {}: expected both >= 1", S, align));
  if (chunks < 1 || chunks > kMaxPipelineChunks)
    throw Error(fmt::format("pipelined: {} row chunks: expected 1 .. {}", chunks, kMaxPipelineChunks));
  std::vector<RowRange> out;
  int64_t begin = 0;
  for (int k = 1; k <= chunks; ++k) {
    // Rounded to the nearest multiple of align; the last ends at S.
    const int64_t exact = S * k / chunks;
    const int64_t end = k == chunks ? S : std::min(S, (exact + align / 2) / align * align);
    if (end > begin) out.push_back({begin, end}), begin = end;
  }
  return out;
}

std::vector<PipelineChunk> ulysses_pipeline_chunks(int64_t heads_per_rank, int head_chunks, int64_t S,
                                                   int row_chunks, int64_t align) {
  const auto heads = ulysses_head_chunks(heads_per_rank, head_chunks);
  const auto rows = ulysses_row_chunks(S, row_chunks, align);
  if (int64_t(heads.size()) * int64_t(rows.size()) > kMaxPipelineChunks)
    throw Error(fmt::format("pipelined: {} head chunks x {} row chunks: expected at most {} chunks in all",
                            heads.size(), rows.size(), kMaxPipelineChunks));
  std::vector<PipelineChunk> out;
  for (const RowRange& r : rows)
    for (const HeadRange& h : heads) out.push_back({h, r});
  return out;
}

std::vector<std::pair<int, int>> ulysses_pipeline_sweep(int64_t heads_per_rank, int64_t S, int64_t align,
                                                        int max_chunks) {
  std::vector<int> heads = ulysses_chunk_sweep(heads_per_rank);
  if (heads.front() != 1) heads.insert(heads.begin(), 1);
  std::vector<std::pair<int, int>> out;
  for (int h : heads) {
    size_t distinct = 0;
    for (int r = 1; int64_t(h) * r <= max_chunks; r *= 2) {
      const size_t n = ulysses_row_chunks(S, r, align).size();
      if (n <= distinct) break;  // S too short for more ranges
      distinct = n;
      out.emplace_back(h, r);
    }
  }
  return out;
}

std::pair<int, int> ulysses_default_split(int64_t heads_per_rank, int64_t S, int64_t block_m, int batches_per_launch,
                                          int tiles_per_wave, double comm_over_compute) {
  if (heads_per_rank < 1 || S < 1 || block_m < 1 || batches_per_launch < 1 || tiles_per_wave < 1 ||
      !(comm_over_compute >= 0))
    throw Error(fmt::format("pipelined: default split of {} heads, S = {}, {}-row tiles, {} batches a launch, {} tiles a "
                            "wave, comm / compute {}: expected positive sizes and a ratio >= 0",
                            heads_per_rank, S, block_m, batches_per_launch, tiles_per_wave, comm_over_compute));
  constexpr int kMaxChunks = 32;
  if (comm_over_compute < 0.03) return {1, 1};
  const int heads = comm_over_compute >= 1 ? 1 : int(std::min<int64_t>(heads_per_rank, kMaxChunks));
  const int64_t heads_a_chunk = (heads_per_rank + heads - 1) / heads;
  int rows = 1;
  for (int r = 2; int64_t(heads) * r <= kMaxChunks; r *= 2) {
    const int64_t m_blocks = ((S + r - 1) / r + block_m - 1) / block_m;
    if (double(batches_per_launch) * double(heads_a_chunk) * double(m_blocks) < 0.7 * tiles_per_wave) break;
    rows = r;
  }
  return {heads, int(ulysses_row_chunks(S, rows, block_m).size())};
}

std::vector<BlockCopy> ulysses_staged_chunk_blocks(const UlyssesLayout& l, const PipelineChunk& c, int first, int n) {
  const UlyssesShape& sh = l.shape();
  const int64_t Hl = l.heads_per_rank();
  if (first < 0 || n < 1 || first + n > sh.P)
    throw Error(fmt::format("pipelined: ranks [{}, {}): expected a group within the {} ranks", first, first + n, sh.P));
  if (c.heads.begin < 0 || c.heads.size() < 1 || c.heads.end > Hl || c.rows.begin < 0 || c.rows.size() < 1 ||
      c.rows.end > sh.S)
    throw Error(fmt::format("pipelined: heads [{}, {}) rows [{}, {}): expected non-empty ranges within {} heads and "
                            "{} rows",
                            c.heads.begin, c.heads.end, c.rows.begin, c.rows.end, Hl, sh.S));
  const size_t row = l.row_bytes(), piece = size_t(Hl) * row, width = size_t(c.heads.size()) * row;
  const size_t src_row = size_t(n) * piece, dst_row = size_t(sh.H) * row;  // one sequence row on each side
  const bool whole_rows = int64_t(n) * Hl == sh.H;  // the group's pieces fill a destination row
  std::vector<BlockCopy> out;
  for (int t = 0; t < sh.P; ++t) {
    const int64_t begin = l.seq_begin(t), lo = std::max(begin, c.rows.begin);
    const int64_t hi = std::min(begin + l.seq_rows(t), c.rows.end);
    if (hi <= lo) continue;
    for (int64_t b = 0; b < sh.B; ++b) {
      const size_t src_at = size_t(b * sh.S + lo) * src_row + size_t(c.heads.begin) * row;
      const size_t dst_at =
          size_t(b * l.seq_rows(t) + (lo - begin)) * dst_row + (size_t(first) * piece) + size_t(c.heads.begin) * row;
      BlockCopy blk;
      blk.src_rank = first, blk.dst_rank = t, blk.width = width;
      if (whole_rows) {  // rows x ranks pieces, piece after piece on both sides
        blk.src_offset = src_at, blk.dst_offset = dst_at;
        blk.src_pitch = blk.dst_pitch = piece;
        blk.height = size_t(hi - lo) * size_t(n);
        out.push_back(blk);
      } else {
        for (int r = 0; r < n; ++r) {
          blk.src_offset = src_at + size_t(r) * piece, blk.dst_offset = dst_at + size_t(r) * piece;
          blk.src_pitch = src_row, blk.dst_pitch = dst_row;
          blk.height = size_t(hi - lo);
          out.push_back(blk);
        }
      }
    }
  }
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
