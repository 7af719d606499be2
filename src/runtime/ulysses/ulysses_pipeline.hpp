#pragma once
// The pipelined Ulysses variant (include/xstage/ulysses.hpp): attention one
// head chunk at a time on a compute stream of its own, each chunk's part of
// the all-to-all sent on the world's streams as soon as that chunk is done,
// while the next chunk computes. Internal to src/runtime/ulysses.
//
//   compute stream:  attn(0) [done 0] attn(1) [done 1] ... attn(n-1) [done n-1]
//   send streams:     wait done 0, send(0), wait done 1, send(1), ...
//
// send(k) waits for done k only, so it overlaps attn(k+1); attn(k+1) writes
// other heads of the local output than send(k) reads, so the two need no
// order. The world's streams then wait for done n-1 (the compute stream
// joined) and world.join() gathers them on the lead stream, so that the lead
// stream's events cover everything.
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "xstage/a2a.hpp"
#include "xstage/attention.hpp"
#include "xstage/ulysses_chunks.hpp"
#include "xstage/world.hpp"

namespace xstage::ulysses_detail {

// Ranks launched together (UlyssesAttention's groups: all of them when
// emulated, else one a GPU) and their head-sharded tensors: the first rank's
// shard, the others' after it, B * S * H/P * D elements each.
struct PipelineGroup {
  int rank_base = 0, n = 1, device = 0;
  Stream stream = nullptr;  // the world's stream of rank_base
  const uint16_t *q = nullptr, *k = nullptr, *v = nullptr;
  uint16_t* o = nullptr;
};

class UlyssesPipeline {
 public:
  // Creates each group's compute stream and events (one a possible chunk)
  // once; nothing is allocated or created per run after a configuration's
  // first run at a sequence length.
  UlyssesPipeline(World& world, std::vector<PipelineGroup> groups, int64_t B, int64_t heads_per_rank, int64_t D,
                  AttentionKernel kernel);
  ~UlyssesPipeline();
  UlyssesPipeline(const UlyssesPipeline&) = delete;
  UlyssesPipeline& operator=(const UlyssesPipeline&) = delete;

  // The layout and all-to-all buffers of the selected S (the caller's; they
  // stay valid until the next call). Drops the plans of the previous S.
  void set_sequence(const UlyssesLayout& layout, const A2aBuffers& buffers);

  // One run, between world.fork() and world.join(). The first run of a
  // (version, chunks) at a sequence length builds its send plan (device
  // copy lists: allocations and a device synchronisation), so time it only
  // after one run. Throws xstage::Error for chunks outside 1 .. H/P or a
  // version the backend lacks.
  void enqueue(A2aVersion version, int chunks);

 private:
  struct ChunkSends;
  struct Plan;
  Plan& plan(A2aVersion version, int chunks);
  Plan build(A2aVersion version, int chunks) const;
  void launch_attention(size_t group, HeadRange heads) const;
  void send(const ChunkSends& s) const;
  size_t group_of(int rank) const;
  void release() noexcept;  // the streams and events made so far

  World& w_;
  std::vector<PipelineGroup> groups_;
  int64_t B_, Hl_, D_;
  AttentionKernel kernel_;
  std::vector<Stream> compute_;             // [group]
  std::vector<void*> start_;                // [group] cudaEvent_t: the run's start on the group's world stream
  std::vector<std::vector<void*>> done_;    // [group][chunk] cudaEvent_t: the chunk's attention is done
  const UlyssesLayout* layout_ = nullptr;
  const A2aBuffers* buffers_ = nullptr;
  std::map<std::pair<A2aVersion, int>, std::unique_ptr<Plan>> plans_;
};

}  // namespace xstage::ulysses_detail
