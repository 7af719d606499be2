#pragma once
// Ulysses sequence parallelism: where every element of a [B, S, H, D] tensor
// lives on P ranks, before and after attention, and the all-to-all between the
// two layouts as a list of 2-D block copies. CPU only.
//
//   sequence-sharded (outside attention): rank r holds [B, S_r, H, D], the
//     rows [r*c, min(S, (r+1)*c)) with c = ceil(S / P). The last ranks may hold
//     fewer rows, even none (as torch.chunk does).
//   head-sharded (inside attention): rank r holds [B, S, H/P, D], the heads
//     [r*H/P, (r+1)*H/P). H % P != 0 is rejected.
//
// Pre-attention (seq_to_heads) sends, from sequence rank i to head rank j, the
// rows of i restricted to the heads of j; post-attention (heads_to_seq) is the
// inverse. Every block is contiguous per (row): width (H/P)*D elements.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace xstage {

enum class A2aDirection { seq_to_heads, heads_to_seq };
std::string to_string(A2aDirection d);           // "seq-to-heads", "heads-to-seq"
A2aDirection parse_direction(std::string_view);  // also "pre", "post"

struct UlyssesShape {
  int64_t B = 1, S = 0, H = 0, D = 0;
  int P = 1;
  size_t elem_bytes = 2;  // bf16
};

// One strided copy between two ranks' buffers: `height` rows of `width` bytes.
struct BlockCopy {
  int src_rank = 0, dst_rank = 0;
  size_t src_offset = 0, src_pitch = 0;
  size_t dst_offset = 0, dst_pitch = 0;
  size_t width = 0, height = 0;
  size_t bytes() const { return width * height; }
};

class UlyssesLayout {
 public:
  // Throws xstage::Error when a dimension is < 1 (S may be any value >= 1),
  // P < 1, H % P != 0 or the sizes overflow.
  explicit UlyssesLayout(const UlyssesShape& shape);

  const UlyssesShape& shape() const { return s_; }
  int64_t chunk_rows() const { return c_; }  // c = ceil(S / P)
  int64_t seq_begin(int rank) const;         // first global row of `rank`
  int64_t seq_rows(int rank) const;          // S_r, possibly 0
  int64_t heads_per_rank() const { return s_.H / s_.P; }
  int seq_owner(int64_t s) const { return static_cast<int>(s / c_); }
  int head_owner(int64_t h) const { return static_cast<int>(h / heads_per_rank()); }

  size_t row_bytes() const { return static_cast<size_t>(s_.D) * s_.elem_bytes; }  // one (b, s, h): D elements
  size_t piece_bytes() const { return heads_per_rank() * row_bytes(); }         // one rank's heads of one row
  size_t seq_shard_bytes(int rank) const;  // B * S_r * H * D * e
  size_t head_shard_bytes() const;         // B * S * H/P * D * e
  size_t total_bytes() const;              // B * S * H * D * e: the payload of one all-to-all
  size_t max_shard_bytes() const;          // the largest shard either way (for buffer capacity)
  size_t src_shard_bytes(A2aDirection d, int rank) const;
  size_t dst_shard_bytes(A2aDirection d, int rank) const;

  // Byte offset of element (b, s, h, d=0) of the global tensor in its owner's
  // shard; the owner is seq_owner(s) or head_owner(h).
  size_t seq_sharded_offset(int64_t b, int64_t s, int64_t h) const;
  size_t head_sharded_offset(int64_t b, int64_t s, int64_t h) const;

  // The all-to-all as block copies, one per (src rank, dst rank, batch) with
  // at least one row; the permute is in the pitches.
  std::vector<BlockCopy> blocks(A2aDirection d) const;

  // For collectives that move equal slots (ncclAlltoAll): rank r's send stage
  // holds P slots of slot_bytes() (B * c rows of H/P heads, batches one after
  // another, padded); slot j goes to rank j, landing in its receive stage at
  // slot r. pack_blocks copies rank r's source shard into its send stage,
  // unpack_blocks its receive stage into its destination shard; in both,
  // src_rank == dst_rank == r and the stage side is addressed by offset.
  size_t slot_bytes() const { return static_cast<size_t>(s_.B) * c_ * piece_bytes(); }
  std::vector<BlockCopy> pack_blocks(A2aDirection d, int rank) const;
  std::vector<BlockCopy> unpack_blocks(A2aDirection d, int rank) const;

 private:
  UlyssesShape s_;
  int64_t c_ = 0;
};

// CPU references on byte buffers (any element size). in[r] is rank r's source
// shard (src_shard_bytes), the result out[r] its destination shard.
using RankBuffers = std::vector<std::vector<uint8_t>>;
RankBuffers reference_all_to_all(const UlyssesLayout& layout, A2aDirection d, const RankBuffers& in);
// Executes a block list on host buffers (what the GPU versions do), for tests
// of the plan itself. out must already have the destination sizes.
void apply_blocks(const std::vector<BlockCopy>& blocks, const RankBuffers& in, RankBuffers& out);

}  // namespace xstage
