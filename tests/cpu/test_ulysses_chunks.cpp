// The pipelined variant's head chunks and its chunked all-to-all plans
// (include/xstage/ulysses/ulysses_chunks.hpp), on the CPU: every chunk count of
// random shapes with uneven S, direct and through NCCL-style equal slots,
// against the whole all-to-all's reference; and each chunk writes only its
// own heads, so that a chunk's sends and the next chunk's attention touch
// disjoint bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>

#include "xstage/core/error.hpp"
#include "xstage/ulysses/ulysses.hpp"
#include "xstage/ulysses/ulysses_chunks.hpp"
#include "xstage/ulysses/ulysses_layout.hpp"

using namespace xstage;

namespace {

RankBuffers random_head_shards(const UlyssesLayout& l, std::mt19937_64& rng) {
  RankBuffers in(size_t(l.shape().P));
  for (int r = 0; r < l.shape().P; ++r) {
    in[size_t(r)].resize(l.head_shard_bytes());
    for (auto& x : in[size_t(r)]) x = static_cast<uint8_t>(rng());
  }
  return in;
}

RankBuffers poisoned_seq_shards(const UlyssesLayout& l) {
  RankBuffers out(size_t(l.shape().P));
  for (int r = 0; r < l.shape().P; ++r) out[size_t(r)].assign(l.seq_shard_bytes(r), 0xEE);
  return out;
}

UlyssesShape random_shape(std::mt19937_64& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  UlyssesShape s;
  s.P = pick(1, 5);
  s.B = pick(1, 3);
  s.S = pick(1, 6 * s.P + 3);  // often not a multiple of P, sometimes below P (ranks without rows)
  s.H = s.P * pick(1, 7);      // 1 .. 7 heads a rank: chunk counts that do not divide them
  s.D = pick(1, 5);
  s.elem_bytes = size_t(pick(1, 2));
  return s;
}

std::string describe(const UlyssesShape& s, int chunks) {
  return "B=" + std::to_string(s.B) + " S=" + std::to_string(s.S) + " H=" + std::to_string(s.H) + " D=" +
         std::to_string(s.D) + " P=" + std::to_string(s.P) + " e=" + std::to_string(s.elem_bytes) +
         " chunks=" + std::to_string(chunks);
}


// Whether a chunk owns the cell (query row, a rank's local head).
using CellOfChunk = std::function<bool(int64_t row, int64_t local_head)>;

// The head shards with every cell outside the chunk poisoned (0x5A): a send
// that reads another chunk's cells carries the poison.
RankBuffers poisoned_outside(const UlyssesLayout& l, RankBuffers heads, const CellOfChunk& mine) {
  const UlyssesShape& s = l.shape();
  for (int r = 0; r < s.P; ++r)
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t q = 0; q < s.S; ++q)
        for (int64_t hh = 0; hh < l.heads_per_rank(); ++hh)
          if (!mine(q, hh)) std::memset(heads[size_t(r)].data() + l.head_sharded_offset(b, q, hh), 0x5A, l.row_bytes());
  return heads;
}

// The chunk's cells of the destinations hold the reference, every other cell
// still its poison (0xEE).
void expect_only_the_chunks_cells(const UlyssesLayout& l, const RankBuffers& want, const RankBuffers& out,
                                  const CellOfChunk& mine) {
  const UlyssesShape& s = l.shape();
  const size_t w = l.row_bytes();
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t q = 0; q < s.S; ++q)
      for (int64_t hg = 0; hg < s.H; ++hg) {
        const int r = l.seq_owner(q);
        const size_t at = l.seq_sharded_offset(b, q, hg);
        const bool own = mine(q, hg % l.heads_per_rank());
        const auto ref = want[size_t(r)].begin() + long(at);
        const std::vector<uint8_t> expected = own ? std::vector<uint8_t>(ref, ref + long(w)) : std::vector<uint8_t>(w, 0xEE);
        const auto got = out[size_t(r)].begin() + long(at);
        ASSERT_EQ(std::vector<uint8_t>(got, got + long(w)), expected)
            << "b " << b << " row " << q << " head " << hg << (own ? " (the chunk's)" : " (another chunk's)");
      }
}

}  // namespace

TEST(UlyssesHeadChunks, ConsecutiveRangesCoverEveryHeadOnceWithSizesWithinOne) {
  for (int64_t hl = 1; hl <= 13; ++hl)
    for (int n = 1; n <= hl; ++n) {
      const auto chunks = ulysses_head_chunks(hl, n);
      ASSERT_EQ(chunks.size(), size_t(n));
      int64_t next = 0, least = hl, most = 0;
      for (const HeadRange& h : chunks) {
        EXPECT_EQ(h.begin, next) << hl << " heads, " << n << " chunks";
        EXPECT_GE(h.size(), 1);
        least = std::min(least, h.size());
        most = std::max(most, h.size());
        next = h.end;
      }
      EXPECT_EQ(next, hl);
      EXPECT_LE(most - least, 1) << hl << " heads, " << n << " chunks";
    }
  EXPECT_THROW(ulysses_head_chunks(3, 0), Error);
  EXPECT_THROW(ulysses_head_chunks(3, 4), Error);
  EXPECT_THROW(ulysses_head_chunks(0, 1), Error);
}

TEST(UlyssesHeadChunks, TheSweepDoublesFromTwoAndEndsAtOneHeadAChunk) {
  EXPECT_EQ(ulysses_chunk_sweep(1), (std::vector<int>{1}));
  EXPECT_EQ(ulysses_chunk_sweep(2), (std::vector<int>{2}));
  EXPECT_EQ(ulysses_chunk_sweep(3), (std::vector<int>{2, 3}));   // 24 heads on 8 emulated ranks
  EXPECT_EQ(ulysses_chunk_sweep(12), (std::vector<int>{2, 4, 8, 12}));  // 24 heads on 2 GPUs
  EXPECT_EQ(ulysses_chunk_sweep(16), (std::vector<int>{2, 4, 8, 16}));
  EXPECT_THROW(ulysses_chunk_sweep(0), Error);
}

TEST(UlyssesChunkBlocks, EveryChunkCountAssemblesTheWholeAllToAll) {
  std::mt19937_64 rng(20);
  for (int trial = 0; trial < 150; ++trial) {
    const UlyssesShape s = random_shape(rng);
    const UlyssesLayout l(s);
    const RankBuffers in = random_head_shards(l, rng);
    const RankBuffers want = reference_all_to_all(l, A2aDirection::heads_to_seq, in);
    for (int n = 1; n <= l.heads_per_rank(); ++n) {
      SCOPED_TRACE(describe(s, n));
      RankBuffers out = poisoned_seq_shards(l);
      for (const HeadRange& h : ulysses_head_chunks(l.heads_per_rank(), n))
        apply_blocks(ulysses_chunk_blocks(l, h), in, out);
      EXPECT_EQ(out, want);
    }
  }
}

TEST(UlyssesChunkBlocks, AChunkReadsAndWritesOnlyItsOwnHeads) {
  std::mt19937_64 rng(21);
  for (int trial = 0; trial < 100; ++trial) {
    const UlyssesShape s = random_shape(rng);
    const UlyssesLayout l(s);
    const int64_t hl = l.heads_per_rank();
    const RankBuffers in = random_head_shards(l, rng);
    const RankBuffers want = reference_all_to_all(l, A2aDirection::heads_to_seq, in);
    const int n = std::uniform_int_distribution<int>(1, int(hl))(rng);
    for (const HeadRange& h : ulysses_head_chunks(hl, n)) {
      SCOPED_TRACE(describe(s, n) + " heads " + std::to_string(h.begin) + ".." + std::to_string(h.end));
      // Other heads of the source poisoned: the chunk must not read them.
      const CellOfChunk mine = [&](int64_t, int64_t hh) { return hh >= h.begin && hh < h.end; };
      RankBuffers out = poisoned_seq_shards(l);
      apply_blocks(ulysses_chunk_blocks(l, h), poisoned_outside(l, in, mine), out);
      expect_only_the_chunks_cells(l, want, out, mine);
    }
  }
}

TEST(UlyssesChunkBlocks, PackedSlotsThroughAnAllToAllAssembleTheWholeOutput) {
  std::mt19937_64 rng(22);
  for (int trial = 0; trial < 150; ++trial) {
    const UlyssesShape s = random_shape(rng);
    const UlyssesLayout l(s);
    const RankBuffers in = random_head_shards(l, rng);
    const RankBuffers want = reference_all_to_all(l, A2aDirection::heads_to_seq, in);
    const size_t stage = size_t(s.P) * l.slot_bytes();  // nccl_stage_bytes: what the buffers hold
    for (int n = 1; n <= l.heads_per_rank(); ++n) {
      SCOPED_TRACE(describe(s, n));
      RankBuffers out = poisoned_seq_shards(l);
      size_t region_end = 0;
      for (const HeadRange& h : ulysses_head_chunks(l.heads_per_rank(), n)) {
        const size_t base = ulysses_chunk_stage_offset(l, h), slot = ulysses_chunk_slot_bytes(l, h);
        EXPECT_EQ(base, region_end) << "chunk regions follow each other";
        region_end = base + size_t(s.P) * slot;
        ASSERT_LE(region_end, stage);
        RankBuffers send(size_t(s.P), std::vector<uint8_t>(stage, 0x11)), recv = send;
        for (int r = 0; r < s.P; ++r) {
          RankBuffers mine(size_t(s.P));
          mine[size_t(r)] = send[size_t(r)];
          apply_blocks(ulysses_chunk_pack_blocks(l, h, r), in, mine);
          send[size_t(r)] = mine[size_t(r)];
        }
        // ncclAlltoAll on the chunk's region: slot j of rank r to slot r of rank j.
        for (int r = 0; r < s.P; ++r)
          for (int j = 0; j < s.P; ++j)
            std::memcpy(recv[size_t(j)].data() + base + size_t(r) * slot,
                        send[size_t(r)].data() + base + size_t(j) * slot, slot);
        for (int r = 0; r < s.P; ++r) {
          RankBuffers stage_of_r(size_t(s.P));
          stage_of_r[size_t(r)] = recv[size_t(r)];
          apply_blocks(ulysses_chunk_unpack_blocks(l, h, r), stage_of_r, out);
        }
      }
      EXPECT_EQ(region_end, stage) << "the chunks' regions fill the stage";
      EXPECT_EQ(out, want);
    }
  }
}

TEST(UlyssesChunkBlocks, RejectsHeadRangesOutsideARank) {
  const UlyssesLayout l({1, 10, 6, 4, 2, 2});  // 3 heads a rank
  EXPECT_THROW(ulysses_chunk_blocks(l, HeadRange{0, 0}), Error);
  EXPECT_THROW(ulysses_chunk_blocks(l, HeadRange{2, 4}), Error);
  EXPECT_THROW(ulysses_chunk_blocks(l, HeadRange{-1, 1}), Error);
  EXPECT_NO_THROW(ulysses_chunk_blocks(l, HeadRange{0, 3}));
}

TEST(UlyssesRowChunks, RangesCoverTheSequenceOnceAndStartOnTileRows) {
  for (int64_t S : {1, 2, 127, 128, 129, 333, 1000, 4096, 8191, 32768 + 7})
    for (int64_t align : {1, 64, 128})
      for (int n = 1; n <= 40; ++n) {
        const auto rows = ulysses_row_chunks(S, n, align);
        SCOPED_TRACE("S " + std::to_string(S) + " align " + std::to_string(align) + " n " + std::to_string(n));
        ASSERT_FALSE(rows.empty());
        ASSERT_LE(rows.size(), size_t(n));
        int64_t next = 0;
        for (const RowRange& r : rows) {
          EXPECT_EQ(r.begin, next);
          EXPECT_GE(r.size(), 1);
          EXPECT_EQ(r.begin % align, 0) << "a tile would straddle two chunks";
          next = r.end;
        }
        EXPECT_EQ(next, S);
        if (S >= int64_t(n) * align && S % (int64_t(n) * align) == 0) EXPECT_EQ(rows.size(), size_t(n));
      }
  EXPECT_EQ(ulysses_row_chunks(4096, 8, 128).size(), 8u);
  EXPECT_EQ(ulysses_row_chunks(4096, 8, 128)[1].begin, 512);
  EXPECT_THROW(ulysses_row_chunks(0, 1, 128), Error);
  EXPECT_THROW(ulysses_row_chunks(10, 0, 128), Error);
  EXPECT_THROW(ulysses_row_chunks(10, kMaxPipelineChunks + 1, 1), Error);
  EXPECT_THROW(ulysses_row_chunks(10, 1, 0), Error);
}

TEST(UlyssesRowChunks, TheSweepStaysWithinItsChunkBudgetAndStopsWhereSIsTooShort) {
  const auto sweep = ulysses_pipeline_sweep(3, 4096, 128);  // 24 heads on 8 emulated ranks
  EXPECT_EQ(sweep.front(), std::make_pair(1, 1));
  for (const auto& [h, r] : sweep) EXPECT_LE(h * r, 32);
  EXPECT_NE(std::find(sweep.begin(), sweep.end(), std::make_pair(1, 32)), sweep.end());
  EXPECT_NE(std::find(sweep.begin(), sweep.end(), std::make_pair(3, 8)), sweep.end());
  EXPECT_EQ(std::find(sweep.begin(), sweep.end(), std::make_pair(3, 16)), sweep.end());
  // 300 rows, 128-row tiles: at most 3 ranges; 4 row chunks give those 3 and 8 no more, so the sweep stops at 4.
  for (const auto& [h, r] : ulysses_pipeline_sweep(3, 300, 128)) EXPECT_LE(r, 4) << h << "x" << r;
  EXPECT_EQ(ulysses_pipeline_sweep(1, 1, 128), (std::vector<std::pair<int, int>>{{1, 1}}));
}

namespace {
// The group's staged buffer [B, S, n, H/P, D] made from the ranks' head shards.
std::vector<uint8_t> staged(const UlyssesLayout& l, const RankBuffers& heads, int first, int n) {
  const UlyssesShape& s = l.shape();
  const int64_t hl = l.heads_per_rank();
  std::vector<uint8_t> out(size_t(s.B * s.S * n * hl) * l.row_bytes());
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t q = 0; q < s.S; ++q)
      for (int r = 0; r < n; ++r)
        for (int64_t h = 0; h < hl; ++h)
          std::memcpy(out.data() + size_t(((b * s.S + q) * n + r) * hl + h) * l.row_bytes(),
                      heads[size_t(first + r)].data() + l.head_sharded_offset(b, q, h), l.row_bytes());
  return out;
}
}  // namespace

TEST(UlyssesStagedChunks, EverySplitFromStagedGroupsAssemblesTheWholeAllToAll) {
  std::mt19937_64 rng(25);
  for (int trial = 0; trial < 150; ++trial) {
    const UlyssesShape s = random_shape(rng);
    const UlyssesLayout l(s);
    const RankBuffers heads = random_head_shards(l, rng);
    const RankBuffers want = reference_all_to_all(l, A2aDirection::heads_to_seq, heads);
    // One group of every rank (emulated ranks), or a group a rank (one rank a GPU).
    for (bool one_group : {true, false}) {
      RankBuffers in(size_t(s.P));
      std::vector<std::pair<int, int>> groups;
      if (one_group) {
        groups.emplace_back(0, s.P);
      } else {
        for (int r = 0; r < s.P; ++r) groups.emplace_back(r, 1);
      }
      for (auto [first, n] : groups) in[size_t(first)] = staged(l, heads, first, n);
      for (int h = 1; h <= l.heads_per_rank(); ++h)
        for (int rows : {1, 2, 5}) {
          SCOPED_TRACE(describe(s, h) + " rows " + std::to_string(rows) + (one_group ? " one group" : " a group a rank"));
          RankBuffers out = poisoned_seq_shards(l);
          size_t blocks = 0, bytes = 0;
          for (const PipelineChunk& c : ulysses_pipeline_chunks(l.heads_per_rank(), h, s.S, rows, 1))
            for (auto [first, n] : groups) {
              const auto b = ulysses_staged_chunk_blocks(l, c, first, n);
              blocks += b.size();
              for (const BlockCopy& x : b) bytes += x.bytes();
              apply_blocks(b, in, out);
            }
          EXPECT_EQ(out, want);
          EXPECT_EQ(bytes, l.total_bytes()) << "every byte sent once";
          (void)blocks;
        }
    }
  }
}

// A chunk's sends read only its own cells of the staged output (the next
// chunk's attention writes the others meanwhile) and write only its own cells
// of the destinations.
TEST(UlyssesStagedChunks, AChunkReadsAndWritesOnlyItsOwnRowsAndHeads) {
  std::mt19937_64 rng(26);
  for (int trial = 0; trial < 100; ++trial) {
    const UlyssesShape s = random_shape(rng);
    const UlyssesLayout l(s);
    const int64_t hl = l.heads_per_rank();
    const RankBuffers heads = random_head_shards(l, rng);
    const RankBuffers want = reference_all_to_all(l, A2aDirection::heads_to_seq, heads);
    const int h = std::uniform_int_distribution<int>(1, int(hl))(rng);
    const int n = std::uniform_int_distribution<int>(1, 6)(rng);
    const bool one_group = trial % 2 == 0;
    for (const PipelineChunk& c : ulysses_pipeline_chunks(hl, h, s.S, n, 2)) {
      SCOPED_TRACE(describe(s, h) + " rows " + std::to_string(c.rows.begin) + ".." + std::to_string(c.rows.end) +
                   " heads " + std::to_string(c.heads.begin) + ".." + std::to_string(c.heads.end));
      const CellOfChunk mine = [&](int64_t q, int64_t local_head) {
        return q >= c.rows.begin && q < c.rows.end && local_head >= c.heads.begin && local_head < c.heads.end;
      };
      const RankBuffers poisoned_heads = poisoned_outside(l, heads, mine);
      RankBuffers in(size_t(s.P)), out = poisoned_seq_shards(l);
      for (int first = 0; first < s.P; first += one_group ? s.P : 1) {
        const int group = one_group ? s.P : 1;
        in[size_t(first)] = staged(l, poisoned_heads, first, group);
        apply_blocks(ulysses_staged_chunk_blocks(l, c, first, group), in, out);
      }
      expect_only_the_chunks_cells(l, want, out, mine);
    }
  }
}

TEST(UlyssesStagedChunks, OneGroupSendsOneCopyADestinationAndBatch) {
  const UlyssesLayout l({1, 4096, 24, 128, 8, 2});  // FLUX on 8 emulated ranks
  for (int h : {1, 3})
    for (const PipelineChunk& c : ulysses_pipeline_chunks(3, h, 4096, 8, 128)) {
      const auto b = ulysses_staged_chunk_blocks(l, c, 0, 8);
      ASSERT_EQ(b.size(), 1u);  // a row chunk is one shard here
      EXPECT_EQ(b[0].height, size_t(512 * 8));
      if (h == 1) EXPECT_EQ(b[0].width, b[0].src_pitch) << "every head: one contiguous range";
    }
  EXPECT_THROW(ulysses_staged_chunk_blocks(l, {{0, 3}, {0, 4096}}, 4, 8), Error);
  EXPECT_THROW(ulysses_staged_chunk_blocks(l, {{0, 4}, {0, 4096}}, 0, 8), Error);
}

// The default split against the sweeps it was read from (8 emulated ranks,
// 3 heads a rank, 128-row tiles, 132 tiles a wave; results/h200/ulysses/
// pipeline-vs-torch/a9baf9c): comm / compute from the host path's 51.4 GB/s
// and device memory's 4.2 TB/s against 650 TFLOP/s of attention.
TEST(UlyssesDefaultSplit, PicksTheSweepsBestSplitsOnTheirOwnCells) {
  auto split = [](int64_t S, double rho) { return ulysses_default_split(3, S, 128, 8, 132, rho); };
  EXPECT_EQ(split(4096, 1.55), std::make_pair(1, 8));   // host 4k: the link is the bottleneck
  EXPECT_EQ(split(8192, 0.77), std::make_pair(3, 4));   // host 8k
  EXPECT_EQ(split(16384, 0.39), std::make_pair(3, 8));  // host 16k
  EXPECT_EQ(split(32768, 0.19), std::make_pair(3, 8));  // host 32k: at most 32 chunks
  EXPECT_EQ(split(4096, 0.02), std::make_pair(1, 1));   // device memory: nothing worth hiding
  // Short S: as many row chunks as keep 0.7 of a wave, and never more than there are tile rows.
  EXPECT_EQ(ulysses_default_split(3, 300, 128, 8, 132, 2.0), std::make_pair(1, 1));
  EXPECT_EQ(ulysses_default_split(1, 100000, 128, 1, 132, 0.5), std::make_pair(1, 8));  // 98 tiles a chunk
  EXPECT_EQ(ulysses_default_split(1, 1 << 20, 128, 1, 132, 0.5), std::make_pair(1, 32));
  EXPECT_EQ(ulysses_default_split(64, 4096, 128, 1, 132, 0.5).first, 32);
  EXPECT_THROW(ulysses_default_split(3, 4096, 128, 8, 0, 0.5), Error);
  EXPECT_THROW(ulysses_default_split(3, 4096, 128, 8, 132, -1), Error);
}

// The estimate behind it: bytes at the path's rate over FLOPs at 650 TFLOP/s.
TEST(UlyssesDefaultSplit, EstimatesTheRatioFromThePathAndCountsTheBatchWhereAGroupIsOneRank) {
  // 8 emulated ranks, FLUX's 24 heads: host PCIe (51.4 GB/s) and device memory (4.2 TB/s).
  EXPECT_EQ(default_pipeline_split(1, 4096, 3, 128, 8, 128, 132, 51.4e9), std::make_pair(1, 8));
  EXPECT_EQ(default_pipeline_split(1, 16384, 3, 128, 8, 128, 132, 51.4e9), std::make_pair(3, 8));
  EXPECT_EQ(default_pipeline_split(1, 4096, 3, 128, 8, 128, 132, 4.2e12), std::make_pair(1, 1));
  // NCCL's equal slots: head chunks only, whatever the rule would split.
  EXPECT_EQ(default_pipeline_split(1, 16384, 3, 128, 8, 128, 132, 51.4e9, A2aVersion::nccl).second, 1);
  // One rank a GPU: a launch covers the batch, so more of it allows more row chunks.
  const auto one = default_pipeline_split(1, 8192, 12, 128, 1, 128, 132, 3.6e10);
  const auto four = default_pipeline_split(4, 8192, 12, 128, 1, 128, 132, 3.6e10);
  EXPECT_GT(four.second, one.second);
  EXPECT_THROW(default_pipeline_split(1, 4096, 3, 128, 8, 128, 132, 0), Error);
}
