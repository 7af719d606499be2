#include "xstage/ulysses/ulysses_layout.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "xstage/core/error.hpp"

namespace xstage {

std::string to_string(A2aDirection d) { return d == A2aDirection::seq_to_heads ? "seq-to-heads" : "heads-to-seq"; }

A2aDirection parse_direction(std::string_view t) {
  if (t == "seq-to-heads" || t == "pre") return A2aDirection::seq_to_heads;
  if (t == "heads-to-seq" || t == "post") return A2aDirection::heads_to_seq;
  throw Error(fmt::format("direction: expected seq-to-heads (pre) or heads-to-seq (post), got '{}'", t));
}

UlyssesLayout::UlyssesLayout(const UlyssesShape& shape) : s_(shape) {
  auto positive = [](int64_t v, const char* name) {
    if (v < 1) throw Error(fmt::format("Ulysses layout: {} must be >= 1, got {}", name, v));
  };
  positive(s_.B, "batch B");
  positive(s_.S, "sequence length S");
  positive(s_.H, "heads H");
  positive(s_.D, "head dim D");
  positive(s_.P, "ranks P");
  if (s_.elem_bytes < 1) throw Error("Ulysses layout: element size must be >= 1 byte");
  if (s_.H % s_.P != 0)
    throw Error(fmt::format("Ulysses layout: heads H = {} must divide by the ranks P = {} (each rank holds H/P "
                            "whole heads); pick H a multiple of P",
                            s_.H, s_.P));
  // Every byte offset below fits in size_t when the whole tensor does.
  const long double total = static_cast<long double>(s_.B) * s_.S * s_.H * s_.D * s_.elem_bytes;
  if (total > static_cast<long double>(std::numeric_limits<int64_t>::max()))
    throw Error(fmt::format("Ulysses layout: [{}, {}, {}, {}] x {} bytes overflows", s_.B, s_.S, s_.H, s_.D,
                            s_.elem_bytes));
  c_ = (s_.S + s_.P - 1) / s_.P;
}

int64_t UlyssesLayout::seq_begin(int rank) const { return std::min<int64_t>(s_.S, rank * c_); }

int64_t UlyssesLayout::seq_rows(int rank) const {
  return std::min<int64_t>(s_.S, (rank + 1) * c_) - seq_begin(rank);
}

size_t UlyssesLayout::seq_shard_bytes(int rank) const { return s_.B * seq_rows(rank) * s_.H * row_bytes(); }
size_t UlyssesLayout::head_shard_bytes() const { return s_.B * s_.S * piece_bytes(); }
size_t UlyssesLayout::total_bytes() const { return s_.B * s_.S * s_.H * row_bytes(); }
size_t UlyssesLayout::max_shard_bytes() const { return std::max(seq_shard_bytes(0), head_shard_bytes()); }

size_t UlyssesLayout::src_shard_bytes(A2aDirection d, int rank) const {
  return d == A2aDirection::seq_to_heads ? seq_shard_bytes(rank) : head_shard_bytes();
}
size_t UlyssesLayout::dst_shard_bytes(A2aDirection d, int rank) const {
  return d == A2aDirection::seq_to_heads ? head_shard_bytes() : seq_shard_bytes(rank);
}

size_t UlyssesLayout::seq_sharded_offset(int64_t b, int64_t s, int64_t h) const {
  const int r = seq_owner(s);
  return ((b * seq_rows(r) + (s - seq_begin(r))) * s_.H + h) * row_bytes();
}

size_t UlyssesLayout::head_sharded_offset(int64_t b, int64_t s, int64_t h) const {
  const int64_t hp = heads_per_rank();
  return ((b * s_.S + s) * hp + h % hp) * row_bytes();
}

std::vector<BlockCopy> UlyssesLayout::blocks(A2aDirection d) const {
  // Sequence rank i and head rank j exchange, per batch b, the S_i rows of i
  // restricted to the heads of j: a piece of (H/P)*D elements per row. On the
  // sequence side consecutive rows are H*D elements apart, on the head side
  // (H/P)*D (contiguous).
  std::vector<BlockCopy> out;
  const size_t w = piece_bytes();
  for (int i = 0; i < s_.P; ++i) {
    const size_t rows = seq_rows(i);
    if (rows == 0) continue;
    for (int j = 0; j < s_.P; ++j) {
      for (int64_t b = 0; b < s_.B; ++b) {
        const size_t seq_off = seq_sharded_offset(b, seq_begin(i), static_cast<int64_t>(j) * heads_per_rank());
        const size_t seq_pitch = s_.H * row_bytes();
        const size_t head_off = head_sharded_offset(b, seq_begin(i), 0);
        const size_t head_pitch = w;
        BlockCopy blk;
        blk.width = w;
        blk.height = rows;
        if (d == A2aDirection::seq_to_heads) {
          blk.src_rank = i, blk.src_offset = seq_off, blk.src_pitch = seq_pitch;
          blk.dst_rank = j, blk.dst_offset = head_off, blk.dst_pitch = head_pitch;
        } else {
          blk.src_rank = j, blk.src_offset = head_off, blk.src_pitch = head_pitch;
          blk.dst_rank = i, blk.dst_offset = seq_off, blk.dst_pitch = seq_pitch;
        }
        out.push_back(blk);
      }
    }
  }
  return out;
}

std::vector<BlockCopy> UlyssesLayout::pack_blocks(A2aDirection d, int rank) const {
  std::vector<BlockCopy> out;
  std::vector<size_t> filled(s_.P, 0);  // bytes already in each peer's slot
  for (const auto& blk : blocks(d)) {
    if (blk.src_rank != rank) continue;
    BlockCopy p = blk;
    p.dst_rank = rank;
    p.dst_offset = blk.dst_rank * slot_bytes() + filled[blk.dst_rank];
    p.dst_pitch = blk.width;
    filled[blk.dst_rank] += blk.bytes();
    out.push_back(p);
  }
  return out;
}

std::vector<BlockCopy> UlyssesLayout::unpack_blocks(A2aDirection d, int rank) const {
  // The same block order as the sender's pack_blocks, so the offsets agree.
  std::vector<BlockCopy> out;
  std::vector<size_t> filled(s_.P, 0);
  for (const auto& blk : blocks(d)) {
    if (blk.dst_rank != rank) continue;
    BlockCopy u = blk;
    u.src_rank = rank;
    u.src_offset = blk.src_rank * slot_bytes() + filled[blk.src_rank];
    u.src_pitch = blk.width;
    filled[blk.src_rank] += blk.bytes();
    out.push_back(u);
  }
  return out;
}

namespace {
void check_sizes(const UlyssesLayout& l, A2aDirection d, const RankBuffers& in) {
  if (in.size() != static_cast<size_t>(l.shape().P))
    throw Error(fmt::format("all-to-all reference: {} input buffers for {} ranks", in.size(), l.shape().P));
  for (int r = 0; r < l.shape().P; ++r)
    if (in[r].size() != l.src_shard_bytes(d, r))
      throw Error(fmt::format("all-to-all reference: rank {} input has {} bytes, expected {}", r, in[r].size(),
                              l.src_shard_bytes(d, r)));
}
}  // namespace

RankBuffers reference_all_to_all(const UlyssesLayout& l, A2aDirection d, const RankBuffers& in) {
  check_sizes(l, d, in);
  const auto& s = l.shape();
  RankBuffers out(s.P);
  for (int r = 0; r < s.P; ++r) out[r].assign(l.dst_shard_bytes(d, r), 0);
  // Element by element (one row of D elements at a time, contiguous in both
  // layouts), straight from the index mapping.
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t q = 0; q < s.S; ++q)
      for (int64_t h = 0; h < s.H; ++h) {
        const int sr = l.seq_owner(q), hr = l.head_owner(h);
        const size_t so = l.seq_sharded_offset(b, q, h), ho = l.head_sharded_offset(b, q, h);
        if (d == A2aDirection::seq_to_heads)
          std::memcpy(out[hr].data() + ho, in[sr].data() + so, l.row_bytes());
        else
          std::memcpy(out[sr].data() + so, in[hr].data() + ho, l.row_bytes());
      }
  return out;
}

void apply_blocks(const std::vector<BlockCopy>& blocks, const RankBuffers& in, RankBuffers& out) {
  for (const auto& blk : blocks) {
    const auto& src = in.at(blk.src_rank);
    auto& dst = out.at(blk.dst_rank);
    if (blk.height == 0) continue;
    const size_t src_end = blk.src_offset + (blk.height - 1) * blk.src_pitch + blk.width;
    const size_t dst_end = blk.dst_offset + (blk.height - 1) * blk.dst_pitch + blk.width;
    if (src_end > src.size() || dst_end > dst.size())
      throw Error(fmt::format("apply_blocks: block {}->{} runs past a buffer (src end {} of {}, dst end {} of {})",
                              blk.src_rank, blk.dst_rank, src_end, src.size(), dst_end, dst.size()));
    for (size_t row = 0; row < blk.height; ++row)
      std::memcpy(dst.data() + blk.dst_offset + row * blk.dst_pitch, src.data() + blk.src_offset + row * blk.src_pitch,
                  blk.width);
  }
}

}  // namespace xstage
