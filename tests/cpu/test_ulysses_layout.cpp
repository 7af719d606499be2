// The Ulysses layouts against a direct index reference written here from the
// definitions (not from the library's offset functions), on random shapes with
// uneven S, and the block plans (direct and slot-staged) against it.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "device/comm/copy2d_list.hpp"
#include "device/remote/seq_shard_rows.cuh"
#include "xstage/core/error.hpp"
#include "xstage/ulysses/ulysses_layout.hpp"

using namespace xstage;

namespace {

// A global [B, S, H, D] tensor of random elements, scattered the two ways by
// the definitions: sequence rows [r*c, min(S, (r+1)*c)) on rank r, heads
// [j*H/P, (j+1)*H/P) on rank j.
struct Direct {
  UlyssesShape s;
  int64_t c, hp;
  std::vector<uint8_t> global;

  Direct(const UlyssesShape& shape, std::mt19937_64& rng) : s(shape), c((s.S + s.P - 1) / s.P), hp(s.H / s.P) {
    global.resize(s.B * s.S * s.H * s.D * s.elem_bytes);
    for (auto& x : global) x = static_cast<uint8_t>(rng());
  }
  int64_t rows(int r) const { return std::max<int64_t>(0, std::min(s.S, (r + 1) * c) - r * c); }

  RankBuffers seq_sharded() const {
    RankBuffers out(s.P);
    for (int r = 0; r < s.P; ++r) out[r].resize(s.B * rows(r) * s.H * s.D * s.elem_bytes);
    for_each([&](int64_t b, int64_t q, int64_t h, int64_t d, size_t g) {
      const int r = static_cast<int>(q / c);
      const size_t e = (((b * rows(r) + (q - r * c)) * s.H + h) * s.D + d) * s.elem_bytes;
      std::copy_n(global.begin() + g, s.elem_bytes, out[r].begin() + e);
    });
    return out;
  }
  RankBuffers head_sharded() const {
    RankBuffers out(s.P, std::vector<uint8_t>(s.B * s.S * hp * s.D * s.elem_bytes));
    for_each([&](int64_t b, int64_t q, int64_t h, int64_t d, size_t g) {
      const int j = static_cast<int>(h / hp);
      const size_t e = (((b * s.S + q) * hp + (h - j * hp)) * s.D + d) * s.elem_bytes;
      std::copy_n(global.begin() + g, s.elem_bytes, out[j].begin() + e);
    });
    return out;
  }
  template <class F>
  void for_each(F f) const {
    size_t g = 0;
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t q = 0; q < s.S; ++q)
        for (int64_t h = 0; h < s.H; ++h)
          for (int64_t d = 0; d < s.D; ++d, g += s.elem_bytes) f(b, q, h, d, g);
  }
};

UlyssesShape random_shape(std::mt19937_64& rng, int P) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  UlyssesShape s;
  s.P = P;
  s.B = pick(1, 3);
  s.S = pick(1, 5 * P + 3);  // often not a multiple of P, sometimes below P
  s.H = P * pick(1, 3);
  s.D = pick(1, 9);
  s.elem_bytes = static_cast<size_t>(pick(1, 4));
  return s;
}

RankBuffers empty_like(const UlyssesLayout& l, A2aDirection d) {
  RankBuffers out(l.shape().P);
  for (int r = 0; r < l.shape().P; ++r) out[r].assign(l.dst_shard_bytes(d, r), 0xEE);
  return out;
}

std::string describe(const UlyssesShape& s) {
  return "B=" + std::to_string(s.B) + " S=" + std::to_string(s.S) + " H=" + std::to_string(s.H) +
         " D=" + std::to_string(s.D) + " P=" + std::to_string(s.P) + " e=" + std::to_string(s.elem_bytes);
}

}  // namespace

TEST(UlyssesLayout, UnevenRowsFollowTorchChunk) {
  const UlyssesLayout l({1, 5, 4, 8, 4, 2});
  EXPECT_EQ(l.chunk_rows(), 2);
  const int64_t want[] = {2, 2, 1, 0};
  for (int r = 0; r < 4; ++r) EXPECT_EQ(l.seq_rows(r), want[r]) << r;
  const UlyssesLayout one({2, 1, 8, 4, 8, 2});
  EXPECT_EQ(one.seq_rows(0), 1);
  for (int r = 1; r < 8; ++r) EXPECT_EQ(one.seq_rows(r), 0) << r;
  EXPECT_EQ(one.seq_shard_bytes(3), 0u);
}

TEST(UlyssesLayout, HeadsMustDivideByRanks) {
  try {
    UlyssesLayout({1, 64, 30, 128, 8, 2});
    FAIL() << "H = 30, P = 8 accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("H = 30"), std::string::npos) << m;
    EXPECT_NE(m.find("P = 8"), std::string::npos) << m;
  }
  EXPECT_THROW(UlyssesLayout({1, 0, 8, 4, 2, 2}), Error);
  EXPECT_THROW(UlyssesLayout({1, 4, 8, 4, 0, 2}), Error);
}

TEST(UlyssesLayout, BothDirectionsMatchTheDirectReference) {
  std::mt19937_64 rng(20240607);
  for (int P : {1, 2, 3, 4, 8})
    for (int trial = 0; trial < 25; ++trial) {
      const UlyssesShape s = random_shape(rng, P);
      SCOPED_TRACE(describe(s));
      const Direct ref(s, rng);
      const UlyssesLayout l(s);
      const RankBuffers seq = ref.seq_sharded(), heads = ref.head_sharded();
      size_t total = 0;
      for (int r = 0; r < P; ++r) {
        ASSERT_EQ(seq[r].size(), l.seq_shard_bytes(r));
        ASSERT_EQ(heads[r].size(), l.head_shard_bytes());
        total += seq[r].size();
      }
      ASSERT_EQ(total, l.total_bytes());
      EXPECT_EQ(reference_all_to_all(l, A2aDirection::seq_to_heads, seq), heads);
      EXPECT_EQ(reference_all_to_all(l, A2aDirection::heads_to_seq, heads), seq);
    }
}

TEST(UlyssesLayout, RoundTripIsTheIdentity) {
  std::mt19937_64 rng(7);
  for (int P : {1, 2, 3, 4, 8}) {
    const UlyssesShape s = random_shape(rng, P);
    SCOPED_TRACE(describe(s));
    const UlyssesLayout l(s);
    const RankBuffers seq = Direct(s, rng).seq_sharded();
    const RankBuffers back =
        reference_all_to_all(l, A2aDirection::heads_to_seq, reference_all_to_all(l, A2aDirection::seq_to_heads, seq));
    EXPECT_EQ(back, seq);
  }
}

TEST(UlyssesLayout, BlockPlansMatchTheReference) {
  std::mt19937_64 rng(99);
  for (int P : {1, 2, 3, 4, 8})
    for (int trial = 0; trial < 10; ++trial)
      for (A2aDirection d : {A2aDirection::seq_to_heads, A2aDirection::heads_to_seq}) {
        const UlyssesShape s = random_shape(rng, P);
        SCOPED_TRACE(describe(s) + " " + to_string(d));
        const UlyssesLayout l(s);
        const Direct ref(s, rng);
        const RankBuffers in = d == A2aDirection::seq_to_heads ? ref.seq_sharded() : ref.head_sharded();
        const RankBuffers want = reference_all_to_all(l, d, in);

        // Direct: each block from the source rank to the destination rank.
        RankBuffers direct = empty_like(l, d);
        const auto blocks = l.blocks(d);
        for (const auto& b : blocks) EXPECT_GT(b.height, 0u);
        apply_blocks(blocks, in, direct);
        EXPECT_EQ(direct, want);

        // Staged like NCCL's all-to-all: pack, move equal slots, unpack.
        RankBuffers send(P, std::vector<uint8_t>(P * l.slot_bytes(), 0xAB)), recv = send;
        for (int r = 0; r < P; ++r) {
          RankBuffers one_out(P);
          one_out[r] = std::move(send[r]);
          apply_blocks(l.pack_blocks(d, r), in, one_out);
          send[r] = std::move(one_out[r]);
        }
        for (int from = 0; from < P; ++from)
          for (int to = 0; to < P; ++to)
            std::copy_n(send[from].begin() + to * l.slot_bytes(), l.slot_bytes(),
                        recv[to].begin() + from * l.slot_bytes());
        RankBuffers staged = empty_like(l, d);
        for (int r = 0; r < P; ++r) {
          RankBuffers one_in(P);
          one_in[r] = recv[r];
          apply_blocks(l.unpack_blocks(d, r), one_in, staged);
        }
        EXPECT_EQ(staged, want);
      }
}

TEST(UlyssesLayout, Bf16HeadsGiveSixteenByteAccessesElseNarrower) {
  // The store kernel's fast path: every offset is a multiple of the piece
  // (H/P * D elements), so D = 128 bf16 allows 16-byte accesses everywhere.
  auto widest = [](const UlyssesLayout& l, A2aDirection d) {
    std::vector<comm::Copy2D> list;
    for (const auto& b : l.blocks(d)) {
      comm::Copy2D c;
      c.src = reinterpret_cast<const void*>((uintptr_t{1} << 20) + b.src_offset);  // 256-byte aligned bases
      c.dst = reinterpret_cast<void*>((uintptr_t{1} << 21) + b.dst_offset);
      c.src_pitch = b.src_pitch, c.dst_pitch = b.dst_pitch, c.width = b.width, c.height = b.height;
      list.push_back(c);
    }
    return comm::copy2d_vector_bytes(list.data(), list.size());
  };
  for (A2aDirection d : {A2aDirection::seq_to_heads, A2aDirection::heads_to_seq}) {
    EXPECT_EQ(widest(UlyssesLayout({2, 1003, 24, 128, 8, 2}), d), 16);
    EXPECT_EQ(widest(UlyssesLayout({1, 77, 8, 6, 4, 2}), d), 8);   // piece 2*6*2 = 24 bytes
    EXPECT_EQ(widest(UlyssesLayout({1, 77, 4, 6, 4, 2}), d), 4);   // piece 1*6*2 = 12 bytes
    EXPECT_EQ(widest(UlyssesLayout({1, 9, 3, 5, 3, 1}), d), 1);    // piece 5 bytes
  }
}

// The remote layer's sequence row view (what the fused Ulysses epilogue and
// a GEMM's remote stores address) against the layout's definition: element
// (b, s, h, d) of the global tensor lives on rank s / c at
// ((b * S_r + s - r * c) * H + h) * D + d of its buffer. Runs never cross a
// shard and stop at S.
TEST(UlyssesLayout, SeqShardRowViewAddressesTheSequenceLayout) {
  std::mt19937_64 rng(38);
  for (int trial = 0; trial < 200; ++trial) {
    UlyssesShape s;
    s.P = 1 + int(rng() % 8);
    s.H = s.P * (1 + int(rng() % 4));
    s.D = 8 * (1 + int(rng() % 16));
    s.B = 1 + int(rng() % 3);
    s.S = 1 + int64_t(rng() % 3000);
    const UlyssesLayout layout(s);
    // Fake buffers: distinct bases far apart, never dereferenced.
    std::vector<uint16_t*> bases;
    for (int d = 0; d < s.P; ++d) bases.push_back(reinterpret_cast<uint16_t*>(uintptr_t(1) << 40) + (int64_t(d) << 32));
    std::vector<void*> table(bases.begin(), bases.end());
    const int64_t b = int64_t(rng() % s.B), h = int64_t(rng() % s.H);
    const remote::SeqShardRows view{table.data(), s.S, layout.chunk_rows(), b, s.H * s.D, h * s.D};
    for (int k = 0; k < 50; ++k) {
      const int64_t row = int64_t(rng() % s.S);
      const int d = layout.seq_owner(row);
      const int64_t expected = ((b * layout.seq_rows(d) + row - layout.seq_begin(d)) * s.H + h) * s.D;
      ASSERT_EQ(view.rank(row), d) << "row " << row;
      ASSERT_EQ(view.row(row) - bases[d], expected) << "S " << s.S << " P " << s.P << " row " << row;
      const int n = 1 + int(rng() % 64);
      const remote::RowRun run = view.run(row, n);
      ASSERT_GE(run.run, 1);
      ASSERT_LE(run.run, n);
      ASSERT_EQ(run.run, int(std::min<int64_t>(n, layout.seq_begin(d) + layout.seq_rows(d) - row)));
      for (int r = 0; r < run.run; ++r) ASSERT_EQ(run.base + r * run.pitch, view.row(row + r));
    }
    ASSERT_EQ(view.run(s.S, 16).run, 0);  // rows from S on are padding
  }
}
