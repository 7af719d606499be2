#pragma once
// The pipelined Ulysses variant (include/xstage/ulysses/ulysses.hpp): attention one
// chunk (heads x query rows, ulysses_chunks.hpp) at a time on a compute
// stream of its own, each chunk's part of the all-to-all sent on the world's
// streams as soon as that chunk is done, while the next chunk computes.
// Internal to src/runtime/ulysses.
//
//   compute stream:  attn(0) [done 0] attn(1) [done 1] ... attn(n-1) [done n-1]
//   send streams:     wait done 0, send(0), wait done 1, send(1), ...
//
// send(k) waits for done k only, so it overlaps attn(k+1); attn(k+1) writes
// other (row, head) cells of the local output than send(k) reads, so the two
// need no order. The world's streams then wait for done n-1 (the compute stream
// joined) and world.join() gathers them on the lead stream, so that the lead
// stream's events cover everything.
//
// With `graph`, a plan's whole run is captured once as one CUDA graph and
// replayed: dozens of chunks cost one launch instead of hundreds of API
// calls, as a PyTorch user's graph-captured pipeline does.
#include <cstdint>
#include <map>
#include <tuple>
#include <memory>
#include <utility>
#include <vector>

#include "xstage/attention/attention.hpp"
#include "xstage/comm/a2a.hpp"
#include "xstage/comm/world.hpp"
#include "xstage/ulysses/ulysses_chunks.hpp"

namespace xstage::ulysses_detail {

// Ranks launched together (UlyssesAttention's groups: all of them when
// emulated, else one a GPU) and their head-sharded tensors: the first rank's
// shard, the others' after it, B * S * H/P * D elements each. The pipelined
// variant writes `o` staged row by row across the group instead
// ([B, S, n, H/P, D], ulysses_staged_chunk_blocks): every variant that reads
// `o` writes it first in the same run.
struct PipelineGroup {
  int rank_base = 0, n = 1, device = 0;
  Stream stream = nullptr;  // the world's stream of rank_base
  const uint16_t *q = nullptr, *k = nullptr, *v = nullptr;
  uint16_t* o = nullptr;
};

class UlyssesPipeline {
 public:
  // Creates each group's compute stream and start event once; a
  // configuration's plan (its chunk events, copy lists and graph) is made by
  // its first run at a sequence length, nothing per run after that.
  // block_m: the kernel's query rows a tile; row chunks start on multiples of it.
  UlyssesPipeline(World& world, std::vector<PipelineGroup> groups, int64_t B, int64_t heads_per_rank, int64_t D,
                  AttentionKernel kernel, int64_t block_m);
  ~UlyssesPipeline();
  UlyssesPipeline(const UlyssesPipeline&) = delete;
  UlyssesPipeline& operator=(const UlyssesPipeline&) = delete;

  // The layout and all-to-all buffers of the selected S (the caller's; they
  // stay valid until the next call). Drops the plans of the previous S.
  void set_sequence(const UlyssesLayout& layout, const A2aBuffers& buffers);

  // One run, between world.fork() and world.join(). `graph`: replayed as a
  // CUDA graph where this process drives one GPU (else stream by stream).
  // The first run of a (version, head chunks, row chunks) at a sequence
  // length builds its send plan (device copy lists: allocations and a device
  // synchronisation), and the first with `graph` captures it, so time it
  // only after one run. Throws
  // xstage::Error for head chunks outside 1 .. H/P, row chunks outside
  // 1 .. kMaxPipelineChunks, row chunks on the nccl version (its equal slots
  // are cut by heads only) or a version the backend lacks.
  void enqueue(A2aVersion version, int head_chunks, int row_chunks, bool graph);

 private:
  struct ChunkSends;
  struct Plan;
  using Key = std::tuple<A2aVersion, int, int>;
  Plan& plan(const Key& key);
  std::unique_ptr<Plan> build(const Key& key) const;
  void enqueue_streams(const Plan& p) const;
  void capture(Plan& p) const;
  void launch_graph(const Plan& p) const;
  void launch_attention(size_t group, const PipelineChunk& c) const;
  void send(const ChunkSends& s) const;
  size_t group_of(int rank) const;
  bool one_device() const;
  std::vector<Stream> streams_of_run(const Plan& p) const;  // every stream a run touches, the lead first
  void release() noexcept;  // the streams and events made so far

  World& w_;
  std::vector<PipelineGroup> groups_;
  int64_t B_, Hl_, D_, block_m_;
  AttentionKernel kernel_;
  std::vector<Stream> compute_;             // [group]
  std::vector<void*> start_;                // [group] cudaEvent_t: the run's start on the group's world stream
  const UlyssesLayout* layout_ = nullptr;
  const A2aBuffers* buffers_ = nullptr;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace xstage::ulysses_detail
