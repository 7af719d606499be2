// The pipelined Ulysses variant's streams, events and send plans
// (ulysses_pipeline.hpp).
#include "runtime/ulysses/ulysses_pipeline.hpp"

#include <cuda_runtime.h>

#include <algorithm>

#include <fmt/format.h>

#include "runtime/comm/device_copy_list.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"

namespace xstage::ulysses_detail {

namespace {
char* at(void* base, size_t offset) { return static_cast<char*>(base) + offset; }
const char* at(const void* base, size_t offset) { return static_cast<const char*>(base) + offset; }

comm::Copy2D copy_of(const void* src, void* dst, const BlockCopy& blk) {
  comm::Copy2D c;
  c.src = src, c.dst = dst;
  c.src_pitch = blk.src_pitch, c.dst_pitch = blk.dst_pitch;
  c.width = blk.width, c.height = blk.height;
  return c;
}

cudaEvent_t event(void* e) { return static_cast<cudaEvent_t>(e); }
}  // namespace

// One chunk's sends, in the version's form (as A2aOp sends the whole output).
struct UlyssesPipeline::ChunkSends {
  std::vector<std::pair<int, comm::Copy2D>> copies;  // copy engine: (source rank, copy) on that rank's stream
  std::vector<std::pair<int, std::unique_ptr<DeviceCopyList>>> lists;  // store kernel: (first rank of a GPU, list)
  int nccl_rank = -1;                                // nccl: pack, NCCL's all-to-all of the chunk's slots, unpack
  std::unique_ptr<DeviceCopyList> pack, unpack;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t slot_bytes = 0;
};

struct UlyssesPipeline::Plan {
  std::vector<PipelineChunk> chunks;
  std::vector<ChunkSends> sends;  // [chunk]
  std::vector<int> send_ranks;    // the ranks whose world streams send; each waits for every chunk's attention
  std::vector<std::vector<void*>> done;  // [group][chunk] cudaEvent_t: the chunk's attention is done
  // Graph replay (made on the first run that asks for it): the run captured
  // once, and the events that order it after and before the world's streams.
  cudaGraphExec_t exec = nullptr;
  std::vector<void*> joins;  // [stream of the run] cudaEvent_t
  void* after = nullptr;     // cudaEvent_t: the replay is done (on the lead stream)
  int device = 0;            // where the events and the graph live

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {  // never throws: after a failed kernel every call fails
    if (exec) (void)cudaGraphExecDestroy(exec);
    for (auto& per_group : done)
      for (void* e : per_group) (void)cudaEventDestroy(event(e));
    for (void* e : joins) (void)cudaEventDestroy(event(e));
    if (after) (void)cudaEventDestroy(event(after));
    (void)cudaGetLastError();
  }
};

UlyssesPipeline::UlyssesPipeline(World& world, std::vector<PipelineGroup> groups, int64_t B, int64_t heads_per_rank,
                                 int64_t D, AttentionKernel kernel, int64_t block_m)
    : w_(world), groups_(std::move(groups)), B_(B), Hl_(heads_per_rank), D_(D), block_m_(block_m), kernel_(kernel) {
  // A failure part way destroys what was made (the destructor does not run
  // for a constructor that throws).
  try {
    for (const PipelineGroup& g : groups_) {
      XSTAGE_CUDA(cudaSetDevice(g.device));
      cudaStream_t s = nullptr;
      XSTAGE_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      compute_.push_back(s);
      cudaEvent_t e = nullptr;
      XSTAGE_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      start_.push_back(e);
    }
  } catch (...) {
    release();
    throw;
  }
}

UlyssesPipeline::~UlyssesPipeline() { release(); }

void UlyssesPipeline::release() noexcept {
  // Never throws: after a failed kernel every call fails, and the process must still exit cleanly.
  plans_.clear();
  for (size_t i = 0; i < groups_.size(); ++i) {
    (void)cudaSetDevice(groups_[i].device);
    if (i < start_.size()) (void)cudaEventDestroy(event(start_[i]));
    if (i < compute_.size()) (void)cudaStreamDestroy(compute_[i]);
  }
  start_.clear();
  compute_.clear();
  (void)cudaGetLastError();
}

void UlyssesPipeline::set_sequence(const UlyssesLayout& layout, const A2aBuffers& buffers) {
  plans_.clear();
  layout_ = &layout;
  buffers_ = &buffers;
}

size_t UlyssesPipeline::group_of(int rank) const {
  for (size_t i = 0; i < groups_.size(); ++i)
    if (rank >= groups_[i].rank_base && rank < groups_[i].rank_base + groups_[i].n) return i;
  throw Error(fmt::format("pipelined: rank {} is not driven by this process; expected one of its local ranks", rank));
}

std::unique_ptr<UlyssesPipeline::Plan> UlyssesPipeline::build(const Key& key) const {
  const auto [version, head_chunks, row_chunks] = key;
  const auto versions = available_versions(w_.backend());
  if (std::find(versions.begin(), versions.end(), version) == versions.end())
    throw Error(fmt::format("pipelined: the {} all-to-all is not available on the {} backend; expected a version the "
                            "backend has", to_string(version),
                            to_string(w_.backend())));
  const UlyssesLayout& l = *layout_;
  const A2aBuffers& b = *buffers_;
  if (version == A2aVersion::nccl && row_chunks != 1)
    throw Error(fmt::format("pipelined nccl: {} row chunks: NCCL's all-to-all moves equal slots cut by heads only; "
                            "expected 1 row chunk",
                            row_chunks));
  auto plan = std::make_unique<Plan>();
  Plan& p = *plan;
  p.chunks = ulysses_pipeline_chunks(Hl_, head_chunks, l.shape().S, row_chunks, block_m_);
  for (const PipelineChunk& c : p.chunks) {
    const HeadRange& h = c.heads;
    ChunkSends cs;
    if (version == A2aVersion::nccl) {
      const int r = w_.local_ranks().front();
      if (b.stage_capacity < nccl_stage_bytes(l))
        throw Error(fmt::format("pipelined nccl: staging holds {} bytes; expected at least {}, what this layout needs", b.stage_capacity,
                                nccl_stage_bytes(l)));
      std::vector<comm::Copy2D> pack, unpack;
      for (const BlockCopy& blk : ulysses_chunk_pack_blocks(l, h, r))
        pack.push_back(copy_of(at(b.input[size_t(r)], blk.src_offset), at(b.send_stage[size_t(r)], blk.dst_offset), blk));
      for (const BlockCopy& blk : ulysses_chunk_unpack_blocks(l, h, r))
        unpack.push_back(
            copy_of(at(b.recv_stage[size_t(r)], blk.src_offset), at(b.output->ptrs[size_t(r)], blk.dst_offset), blk));
      cs.nccl_rank = r;
      cs.pack = std::make_unique<DeviceCopyList>(w_.device_of(r), pack);
      cs.unpack = std::make_unique<DeviceCopyList>(w_.device_of(r), unpack);
      const size_t region = ulysses_chunk_stage_offset(l, h);
      cs.send = at(static_cast<const void*>(b.send_stage[size_t(r)]), region);
      cs.recv = at(b.recv_stage[size_t(r)], region);
      cs.slot_bytes = ulysses_chunk_slot_bytes(l, h);
    } else {
      // From each group's staged output (launch_attention): one copy a
      // destination and batch where a group holds every rank.
      for (const PipelineGroup& g : groups_) {
        std::vector<comm::Copy2D> list;
        for (const BlockCopy& blk : ulysses_staged_chunk_blocks(l, c, g.rank_base, g.n)) {
          comm::Copy2D cp = copy_of(at(b.input[size_t(g.rank_base)], blk.src_offset),
                                    at(b.output->ptrs[size_t(blk.dst_rank)], blk.dst_offset), blk);
          if (version == A2aVersion::copy_engine) {
            // A block whose rows are back to back on both sides is one range: the copy engine
            // moves it at its linear rate (the store kernel keeps the rows, its unit of work).
            if (cp.width == cp.src_pitch && cp.width == cp.dst_pitch)
              cp.width *= cp.height, cp.src_pitch = cp.dst_pitch = cp.width, cp.height = 1;
            cs.copies.emplace_back(g.rank_base, cp);
          } else {
            list.push_back(cp);
          }
        }
        if (!list.empty())
          cs.lists.emplace_back(g.rank_base, std::make_unique<DeviceCopyList>(g.device, list));
      }
    }
    p.sends.push_back(std::move(cs));
  }
  for (const ChunkSends& cs : p.sends) {
    std::vector<int> ranks;
    for (const auto& c : cs.copies) ranks.push_back(c.first);
    for (const auto& c : cs.lists) ranks.push_back(c.first);
    if (cs.nccl_rank >= 0) ranks.push_back(cs.nccl_rank);
    for (int r : ranks)
      if (std::find(p.send_ranks.begin(), p.send_ranks.end(), r) == p.send_ranks.end()) p.send_ranks.push_back(r);
  }
  for (const PipelineGroup& g : groups_) {
    XSTAGE_CUDA(cudaSetDevice(g.device));
    p.done.emplace_back();
    for (size_t k = 0; k < p.chunks.size(); ++k) {
      cudaEvent_t e = nullptr;
      XSTAGE_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      p.done.back().push_back(e);
    }
  }
  return plan;
}

UlyssesPipeline::Plan& UlyssesPipeline::plan(const Key& key) {
  if (layout_ == nullptr) throw Error("pipelined: no sequence length selected; expected set_sequence first");
  auto it = plans_.find(key);
  if (it == plans_.end()) it = plans_.emplace(key, build(key)).first;  // nothing is kept when build throws
  return *it->second;
}

void UlyssesPipeline::launch_attention(size_t gi, const PipelineChunk& c) const {
  const PipelineGroup& g = groups_[gi];
  const int64_t S = layout_->shape().S, n = g.n;
  // The chunk's heads and query rows of every rank of the group: Q, K and V
  // are the head-sharded tensors [n, B, S, H/P, D] seen from (row
  // c.rows.begin, head c.heads.begin), keys and values every row. The output
  // is staged row by row across the group, [B, S, n, H/P, D]
  // (ulysses_staged_chunk_blocks), so that a chunk's rows for one
  // destination leave in one copy: the kernel's batch index is the rank,
  // one launch a batch element (one launch in all when B = 1 or n = 1, where
  // the staged layout is the head-sharded one). The kernel is the one every
  // variant runs.
  const size_t head = size_t(c.heads.begin * D_), row = size_t(c.rows.begin * Hl_ * D_);
  const size_t shard = size_t(B_ * S * Hl_ * D_);
  const bool one = n == 1 || B_ == 1;
  for (int64_t b = 0; b < (one ? 1 : B_); ++b) {
    AttentionForwardArgs a;
    a.B = int(one ? B_ * n : n), a.H = int(c.heads.size()), a.S_q = int(c.rows.size()), a.S_kv = int(S);
    a.D = int(D_);
    const size_t in = size_t(b) * size_t(S * Hl_ * D_) + head;
    a.q = g.q + in + row, a.k = g.k + in, a.v = g.v + in;
    a.q_stride = a.k_stride = a.v_stride =
        AttentionStrides{one && n == 1 ? S * Hl_ * D_ : int64_t(shard), Hl_ * D_, D_};
    // Staged: rank r's row s at (s n + r) H/P; with n = 1 the head-sharded [B, S, H/P, D].
    a.o = g.o + size_t(b) * size_t(S * n * Hl_ * D_) + size_t(c.rows.begin * n * Hl_ * D_) + head;
    a.o_stride = AttentionStrides{n == 1 ? S * Hl_ * D_ : Hl_ * D_, n * Hl_ * D_, D_};
    a.kernel = kernel_;
    attention_forward(a, compute_[gi]);
  }
}

void UlyssesPipeline::send(const ChunkSends& s) const {
  for (const auto& [rank, c] : s.copies) {
    XSTAGE_CUDA(cudaSetDevice(w_.device_of(rank)));
    XSTAGE_CUDA(cudaMemcpy2DAsync(c.dst, c.dst_pitch, c.src, c.src_pitch, c.width, c.height, cudaMemcpyDefault,
                                  w_.stream(rank)));
  }
  for (const auto& [rank, list] : s.lists) list->launch(w_.stream(rank));  // checks its launch
  if (s.nccl_rank >= 0) {
    s.pack->launch(w_.stream(s.nccl_rank));
    w_.native_all_to_all(s.send, s.recv, s.slot_bytes);  // on the same stream
    s.unpack->launch(w_.stream(s.nccl_rank));
  }
}

bool UlyssesPipeline::one_device() const {
  for (const PipelineGroup& g : groups_)
    if (g.device != groups_.front().device) return false;
  return true;
}

void UlyssesPipeline::enqueue(A2aVersion version, int head_chunks, int row_chunks, bool graph) {
  Plan& p = plan({version, head_chunks, row_chunks});
  // One graph holds one device's streams and events here; a process that
  // drives several GPUs (the peer backend) runs stream by stream.
  if (!graph || !one_device()) return enqueue_streams(p);
  if (!p.exec) capture(p);
  launch_graph(p);
}

void UlyssesPipeline::enqueue_streams(const Plan& p) const {
  // The compute streams start after everything before this run on the world's streams.
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    XSTAGE_CUDA(cudaSetDevice(groups_[gi].device));
    XSTAGE_CUDA(cudaEventRecord(event(start_[gi]), groups_[gi].stream));
    XSTAGE_CUDA(cudaStreamWaitEvent(compute_[gi], event(start_[gi]), 0));
  }
  for (size_t k = 0; k < p.chunks.size(); ++k) {
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      XSTAGE_CUDA(cudaSetDevice(groups_[gi].device));
      launch_attention(gi, p.chunks[k]);
      XSTAGE_CUDA(cudaEventRecord(event(p.done[gi][k]), compute_[gi]));
    }
    // Chunk k's sends after chunk k's attention only.
    for (int r : p.send_ranks) {
      XSTAGE_CUDA(cudaSetDevice(w_.device_of(r)));
      XSTAGE_CUDA(cudaStreamWaitEvent(w_.stream(r), event(p.done[group_of(r)][k]), 0));
    }
    send(p.sends[k]);
  }
  // Join: the last record on each compute stream covers all of its work.
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    XSTAGE_CUDA(cudaSetDevice(groups_[gi].device));
    XSTAGE_CUDA(cudaStreamWaitEvent(groups_[gi].stream, event(p.done[gi][p.chunks.size() - 1]), 0));
  }
}

std::vector<Stream> UlyssesPipeline::streams_of_run(const Plan& p) const {
  std::vector<Stream> out{groups_.front().stream};
  auto add = [&](Stream s) {
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  };
  for (const PipelineGroup& g : groups_) add(g.stream);
  for (Stream s : compute_) add(s);
  for (int r : p.send_ranks) add(w_.stream(r));
  return out;
}

void UlyssesPipeline::capture(Plan& p) const {
  // Captured from the lead stream: every other stream of the run joins the
  // capture by waiting on it first and is joined back before the end, so the
  // graph holds the whole run and its inner order (the done events).
  const auto streams = streams_of_run(p);
  p.device = groups_.front().device;
  XSTAGE_CUDA(cudaSetDevice(p.device));
  while (p.joins.size() < streams.size()) {  // kept by the plan: a capture that failed is retried with them
    cudaEvent_t e = nullptr;
    XSTAGE_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    p.joins.push_back(e);
  }
  if (!p.after) {
    cudaEvent_t after = nullptr;
    XSTAGE_CUDA(cudaEventCreateWithFlags(&after, cudaEventDisableTiming));
    p.after = after;
  }
  cudaStream_t lead = streams.front();
  XSTAGE_CUDA(cudaStreamBeginCapture(lead, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    XSTAGE_CUDA(cudaEventRecord(event(p.joins[0]), lead));
    for (size_t i = 1; i < streams.size(); ++i) XSTAGE_CUDA(cudaStreamWaitEvent(streams[i], event(p.joins[0]), 0));
    enqueue_streams(p);
    XSTAGE_CUDA(cudaSetDevice(p.device));
    for (size_t i = 1; i < streams.size(); ++i) {
      XSTAGE_CUDA(cudaEventRecord(event(p.joins[i]), streams[i]));
      XSTAGE_CUDA(cudaStreamWaitEvent(lead, event(p.joins[i]), 0));
    }
    XSTAGE_CUDA(cudaStreamEndCapture(lead, &graph));
  } catch (...) {
    // End the capture whatever failed, every stream joined back first (errors
    // ignored: the first one is what is thrown), so that the streams are usable again.
    for (size_t i = 1; i < streams.size(); ++i) {
      (void)cudaEventRecord(event(p.joins[i]), streams[i]);
      (void)cudaStreamWaitEvent(lead, event(p.joins[i]), 0);
    }
    cudaGraph_t partial = nullptr;
    (void)cudaStreamEndCapture(lead, &partial);
    if (partial) (void)cudaGraphDestroy(partial);
    (void)cudaGetLastError();
    throw;
  }
  const cudaError_t inst = cudaGraphInstantiate(&p.exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  XSTAGE_CUDA(inst);
}

void UlyssesPipeline::launch_graph(const Plan& p) const {
  // The replay starts after everything before it on the run's world streams
  // and they continue after it, as the stream-by-stream run is ordered.
  std::vector<Stream> world_streams{groups_.front().stream};
  for (const PipelineGroup& g : groups_)
    if (std::find(world_streams.begin(), world_streams.end(), g.stream) == world_streams.end())
      world_streams.push_back(g.stream);
  for (int r : p.send_ranks)
    if (std::find(world_streams.begin(), world_streams.end(), w_.stream(r)) == world_streams.end())
      world_streams.push_back(w_.stream(r));
  cudaStream_t lead = world_streams.front();
  XSTAGE_CUDA(cudaSetDevice(p.device));
  for (size_t i = 1; i < world_streams.size(); ++i) {
    XSTAGE_CUDA(cudaEventRecord(event(p.joins[i]), world_streams[i]));  // world_streams is a prefix-free subset
    XSTAGE_CUDA(cudaStreamWaitEvent(lead, event(p.joins[i]), 0));
  }
  XSTAGE_CUDA(cudaGraphLaunch(p.exec, lead));
  XSTAGE_CUDA(cudaEventRecord(event(p.after), lead));
  for (size_t i = 1; i < world_streams.size(); ++i) XSTAGE_CUDA(cudaStreamWaitEvent(world_streams[i], event(p.after), 0));
}

}  // namespace xstage::ulysses_detail
