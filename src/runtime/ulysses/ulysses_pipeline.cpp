// The pipelined Ulysses variant's streams, events and send plans
// (ulysses_pipeline.hpp).
#include "runtime/ulysses/ulysses_pipeline.hpp"

#include <cuda_runtime.h>

#include <algorithm>

#include <fmt/format.h>

#include "runtime/comm/device_copy_list.hpp"
#include "xstage/device.hpp"
#include "xstage/error.hpp"

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
  std::vector<HeadRange> heads;
  std::vector<ChunkSends> sends;  // [chunk]
  std::vector<int> send_ranks;    // the ranks whose world streams send; each waits for every chunk's attention
};

UlyssesPipeline::UlyssesPipeline(World& world, std::vector<PipelineGroup> groups, int64_t B, int64_t heads_per_rank,
                                 int64_t D, AttentionKernel kernel)
    : w_(world), groups_(std::move(groups)), B_(B), Hl_(heads_per_rank), D_(D), kernel_(kernel) {
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
      done_.emplace_back();
      for (int64_t k = 0; k < Hl_; ++k) {
        XSTAGE_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        done_.back().push_back(e);
      }
    }
  } catch (...) {
    release();
    throw;
  }
}

UlyssesPipeline::~UlyssesPipeline() { release(); }

void UlyssesPipeline::release() noexcept {
  // Never throws: after a trapped kernel every call fails, and the process must still exit cleanly.
  plans_.clear();
  for (size_t i = 0; i < groups_.size(); ++i) {
    (void)cudaSetDevice(groups_[i].device);
    if (i < done_.size())
      for (void* e : done_[i]) (void)cudaEventDestroy(event(e));
    if (i < start_.size()) (void)cudaEventDestroy(event(start_[i]));
    if (i < compute_.size()) (void)cudaStreamDestroy(compute_[i]);
  }
  done_.clear();
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
  throw Error(fmt::format("pipelined: rank {} is not driven by this process", rank));
}

UlyssesPipeline::Plan UlyssesPipeline::build(A2aVersion version, int chunks) const {
  const auto versions = available_versions(w_.backend());
  if (std::find(versions.begin(), versions.end(), version) == versions.end())
    throw Error(fmt::format("pipelined: the {} all-to-all is not available on the {} backend", to_string(version),
                            to_string(w_.backend())));
  const UlyssesLayout& l = *layout_;
  const A2aBuffers& b = *buffers_;
  Plan p;
  p.heads = ulysses_head_chunks(Hl_, chunks);
  for (const HeadRange& h : p.heads) {
    ChunkSends cs;
    if (version == A2aVersion::nccl) {
      const int r = w_.local_ranks().front();
      if (b.stage_capacity < nccl_stage_bytes(l))
        throw Error(fmt::format("pipelined nccl: staging holds {} bytes, this layout needs {}", b.stage_capacity,
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
      std::map<int, std::pair<int, std::vector<comm::Copy2D>>> by_device;  // device -> (first rank, list)
      for (const BlockCopy& blk : ulysses_chunk_blocks(l, h)) {
        if (!w_.is_local(blk.src_rank)) continue;
        const comm::Copy2D c = copy_of(at(b.input[size_t(blk.src_rank)], blk.src_offset),
                                       at(b.output->ptrs[size_t(blk.dst_rank)], blk.dst_offset), blk);
        if (version == A2aVersion::copy_engine)
          cs.copies.emplace_back(blk.src_rank, c);
        else
          by_device.try_emplace(w_.device_of(blk.src_rank), blk.src_rank, std::vector<comm::Copy2D>{})
              .first->second.second.push_back(c);
      }
      for (auto& [device, entry] : by_device)
        cs.lists.emplace_back(entry.first, std::make_unique<DeviceCopyList>(device, entry.second));
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
  return p;
}

UlyssesPipeline::Plan& UlyssesPipeline::plan(A2aVersion version, int chunks) {
  if (layout_ == nullptr) throw Error("pipelined: no sequence length selected (set_sequence)");
  auto& slot = plans_[{version, chunks}];
  if (!slot) {
    try {
      slot = std::make_unique<Plan>(build(version, chunks));
    } catch (...) {
      plans_.erase({version, chunks});
      throw;
    }
  }
  return *slot;
}

void UlyssesPipeline::launch_attention(size_t gi, HeadRange h) const {
  const PipelineGroup& g = groups_[gi];
  const int64_t S = layout_->shape().S;
  // The chunk's heads of every rank of the group: the head-sharded tensors
  // [B n, S, H/P, D] seen from head h.begin, h.size() heads wide, with the
  // whole tensor's strides. The kernel is the one every variant runs.
  const size_t first = size_t(h.begin * D_);
  AttentionForwardArgs a;
  a.B = int(B_ * g.n), a.H = int(h.size()), a.S_q = a.S_kv = int(S), a.D = int(D_);
  a.q = g.q + first, a.k = g.k + first, a.v = g.v + first, a.o = g.o + first;
  a.q_stride = a.k_stride = a.v_stride = a.o_stride = AttentionStrides{S * Hl_ * D_, Hl_ * D_, D_};
  a.kernel = kernel_;
  attention_forward(a, compute_[gi]);
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

void UlyssesPipeline::enqueue(A2aVersion version, int chunks) {
  const Plan& p = plan(version, chunks);
  // The compute streams start after everything before this run on the world's streams.
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    XSTAGE_CUDA(cudaSetDevice(groups_[gi].device));
    XSTAGE_CUDA(cudaEventRecord(event(start_[gi]), groups_[gi].stream));
    XSTAGE_CUDA(cudaStreamWaitEvent(compute_[gi], event(start_[gi]), 0));
  }
  for (size_t k = 0; k < p.heads.size(); ++k) {
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      XSTAGE_CUDA(cudaSetDevice(groups_[gi].device));
      launch_attention(gi, p.heads[k]);
      XSTAGE_CUDA(cudaEventRecord(event(done_[gi][k]), compute_[gi]));
    }
    // Chunk k's sends after chunk k's attention (a wait takes the event's
    // latest record, made just above), not after chunk k + 1's.
    for (int r : p.send_ranks) {
      XSTAGE_CUDA(cudaSetDevice(w_.device_of(r)));
      XSTAGE_CUDA(cudaStreamWaitEvent(w_.stream(r), event(done_[group_of(r)][k]), 0));
    }
    send(p.sends[k]);
  }
  // Join: the last record on each compute stream covers all of its work.
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    XSTAGE_CUDA(cudaSetDevice(groups_[gi].device));
    XSTAGE_CUDA(cudaStreamWaitEvent(groups_[gi].stream, event(done_[gi][p.heads.size() - 1]), 0));
  }
}

}  // namespace xstage::ulysses_detail
