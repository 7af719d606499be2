// Ulysses attention on a World (include/xstage/ulysses/ulysses.hpp): buffers, the
// five variants, checks. Kernels: src/device/ulysses/ (launch.hpp); the
// pipelined variant's streams and plans: ulysses_pipeline.hpp.
#include "xstage/ulysses/ulysses.hpp"
#include "xstage/ulysses/ulysses_fused.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <random>

#include <fmt/format.h>

#include "device/attention/attention_launch.hpp"
#include "device/fill/fill_random.hpp"
#include "device/remote/diagnostics.hpp"
#include "device/ulysses/launch.hpp"
#include "runtime/comm/flag_timeout.hpp"
#include "runtime/ulysses/ulysses_pipeline.hpp"
#include "util/npy.hpp"
#include "xstage/attention/attention.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/model/profile.hpp"

namespace xstage {

std::string to_string(UlyssesVariant v) {
  switch (v) {
    case UlyssesVariant::attention_only: return "attention-only";
    case UlyssesVariant::sequential: return "sequential";
    case UlyssesVariant::pipelined: return "pipelined";
    case UlyssesVariant::fused: return "fused";
    case UlyssesVariant::coupled: return "coupled";
  }
  return "?";
}

UlyssesVariant parse_ulysses_variant(std::string_view t) {
  for (auto v : {UlyssesVariant::attention_only, UlyssesVariant::sequential, UlyssesVariant::pipelined,
                 UlyssesVariant::fused, UlyssesVariant::coupled})
    if (t == to_string(v)) return v;
  throw Error(fmt::format("variant '{}': expected attention-only, sequential, pipelined, fused or coupled", t));
}

std::string default_ulysses_profile(Backend b, Placement p) {
  if (b == Backend::emulated) return p == Placement::host ? "h200-host-pcie" : "h200-local";
  return p == Placement::host ? "h200-host-pcie" : "h200-peer";
}

bool is_fused(UlyssesVariant v) { return v == UlyssesVariant::fused || v == UlyssesVariant::coupled; }

std::pair<int, int> default_pipeline_split(int64_t B, int64_t S, int64_t heads_per_rank, int64_t D, int group_ranks,
                                           int64_t block_m, int tiles_per_wave, double link_Bps, A2aVersion version) {
  if (!(link_Bps > 0)) throw Error(fmt::format("pipelined: link rate {} B/s: expected > 0", link_Bps));
  const double heads = double(B) * double(group_ranks) * double(heads_per_rank);
  const double compute_s = 4.0 * heads * double(S) * double(S) * double(D) / kAttentionFlopsPerSecond;
  const double comm_s = heads * double(S) * double(D) * 2.0 / link_Bps;  // bf16 out, every byte sent once
  // One launch covers the group's ranks, or the batch where a group is one rank (UlyssesPipeline).
  const int per_launch = group_ranks == 1 ? int(B) : group_ranks;
  auto split = ulysses_default_split(heads_per_rank, S, block_m, per_launch, tiles_per_wave, comm_s / compute_s);
  if (version == A2aVersion::nccl) split.second = 1;  // its equal slots are cut by heads only
  return split;
}

namespace {
bool sent_by_producer(StorePath s) { return s == StorePath::paced_bulk || s == StorePath::paced_warp; }
}  // namespace

StorePath default_store_path(AttentionKernel kernel, UlyssesVariant variant, Completion flags) {
  if (variant == UlyssesVariant::coupled || flags == Completion::eager) return StorePath::vector16;
  return kernel == AttentionKernel::mma_sync || flags == Completion::lagged ? StorePath::paced
                                                                            : StorePath::paced_warp;
}

std::optional<std::string> ulysses_combination_error(StorePath store, UlyssesVariant variant, Completion flags,
                                                     AttentionKernel kernel) {
  const bool mma = kernel == AttentionKernel::mma_sync;
  if (mma && sent_by_producer(store))
    return fmt::format("the {} store path is sent by the wgmma kernel's producer warpgroup; the mma kernel has none",
                       to_string(store));
  if (!mma && (store == StorePath::vector16_wt || store == StorePath::vector16_cs))
    return fmt::format("store path {} runs on the mma attention kernel only (--kernel mma)", to_string(store));
  if (variant == UlyssesVariant::coupled && is_paced(store))
    return fmt::format("the {} store path has no coupled form (coupled waits for each whole tile's stores)",
                       to_string(store));
  if (variant == UlyssesVariant::fused && flags == Completion::coupled)
    return "coupled completion is the coupled variant (--variants coupled), not a flag timing of fused";
  if (variant == UlyssesVariant::fused && store == StorePath::paced && flags == Completion::eager)
    return "the paced store path publishes its flags lagged or at exit, not eager";
  if (variant == UlyssesVariant::fused && sent_by_producer(store) && flags != Completion::at_exit)
    return fmt::format("the {} store path publishes its flags at exit only, not {}", to_string(store),
                       to_string(flags));
  return std::nullopt;
}

std::string to_string(TileOrder o) { return o == TileOrder::linear ? "linear" : "rotated"; }

TileOrder parse_tile_order(std::string_view t) {
  if (t == "linear") return TileOrder::linear;
  if (t == "rotated") return TileOrder::rotated;
  throw Error(fmt::format("tile order '{}': expected linear or rotated", t));
}

std::vector<int> ulysses_tile_order(const UlyssesLayout& l, int block_m, TileOrder order, int src) {
  const int64_t S = l.shape().S;
  const int m_blocks = int((S + block_m - 1) / block_m);
  std::vector<int> out(static_cast<size_t>(m_blocks));
  if (order == TileOrder::linear) {
    for (int i = 0; i < m_blocks; ++i) out[size_t(i)] = i;
    return out;
  }
  // Group m-blocks by the rank owning their first row, then take one from
  // each group in turn, starting at src + 1.
  const int P = l.shape().P;
  std::vector<std::vector<int>> by_dst(static_cast<size_t>(P));
  for (int m = 0; m < m_blocks; ++m) by_dst[size_t(l.seq_owner(int64_t(m) * block_m))].push_back(m);
  std::vector<size_t> next(static_cast<size_t>(P), 0);
  size_t filled = 0;
  while (filled < out.size())
    for (int k = 1; k <= P; ++k) {
      const size_t d = size_t((src + k) % P);
      if (next[d] < by_dst[d].size()) out[filled++] = by_dst[d][next[d]++];
    }
  return out;
}

namespace {

// XSTAGE_ULYSSES_EXPERIMENT: bits of remote::kDiag* (parts of the fused
// kernel's end left out, or time-stamped); unset or 0 in every run that is a
// result. Only a build with -DXSTAGE_DIAGNOSTICS=ON compiles them in; any
// other refuses the variable rather than run something else than asked.
unsigned int experiment_bits() {
  static const unsigned int bits = [] {
    const char* v = std::getenv("XSTAGE_ULYSSES_EXPERIMENT");
    if (v == nullptr || *v == 0) return 0u;
    char* end = nullptr;
    const unsigned long x = std::strtoul(v, &end, 0);
    if (*end != 0 || (x & ~static_cast<unsigned long>(remote::kDiagAll)) != 0)
      throw Error(fmt::format("XSTAGE_ULYSSES_EXPERIMENT = '{}': expected a sum of the diagnostic bits {}, {}, {}, {}, {}",
                              v, remote::kDiagNoWait, remote::kDiagNoAcquireFence, remote::kDiagTrace,
                              remote::kDiagSlowPoll, remote::kDiagTileTrace));
    if (x != 0 && !remote::kDiagnostics)
      throw Error(fmt::format("XSTAGE_ULYSSES_EXPERIMENT = '{}': diagnostics are compiled out of this build; "
                              "expected a build configured with -DXSTAGE_DIAGNOSTICS=ON", v));
    return unsigned(x);
  }();
  return bits;
}

constexpr double kLog2e = 1.4426950408889634;

void check_shape(World& w, int64_t B, int64_t H, int64_t D, int64_t max_S) {
  if (D != 64 && D != 128) throw Error(fmt::format("ulysses: head dim D: expected 64 or 128, got {}", D));
  if (B < 1 || H < 1 || max_S < 1)
    throw Error(fmt::format("ulysses: B, H and S: expected >= 1, got B = {}, H = {}, S = {}", B, H, max_S));
  if (H % w.size() != 0)
    throw Error(fmt::format("ulysses: H = {} heads do not split over P = {} ranks; expected H a multiple of P", H, w.size()));
  // The kernels carry S as int, and the fused epilogues find a row's owner
  // with 32-bit divisions (device/ulysses/destination.cuh).
  if (max_S > (int64_t(1) << 31) - 1)
    throw Error(fmt::format("ulysses: S = {}: expected at most 2^31 - 1 tokens", max_S));
  // Tile indices: 32 bits in the fused kernels' flag walk at exit (the 32-bit walk; BLOCK_M >= 128).
  const int64_t tiles = B * ((max_S + 127) / 128) * H;
  if (tiles > (int64_t(1) << 31) - 1)
    throw Error(fmt::format("ulysses: B * H * ceil(S / 128) = {} tiles: expected at most 2^31 - 1", tiles));
}
}  // namespace

struct UlyssesAttention::Impl {
  // Ranks launched together: all of them when emulated (one GPU, one
  // launch), else one per local rank.
  struct Group {
    int rank_base = 0, n = 1, device = 0;
    Stream stream = nullptr;
    uint16_t *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;  // the first rank's shard
    int* order[2] = {nullptr, nullptr};                               // [TileOrder]: P * max_m_blocks
    remote::FlagTimeoutRecord* timeout_record = nullptr;  // what its wait timed out on, if it did
    // Diagnostics only (kDiagTrace, kDiagTileTrace): time stamps of the last
    // fused launch's end and of its tiles' ends; whether the tile stamps are
    // of a launch not yet written out, and how many launches were.
    unsigned long long* trace = nullptr;
    bool tile_trace_pending = false;
    int64_t tile_trace_launches = 0;
  };
  static constexpr size_t kEndTraceBytes =
      sizeof(unsigned long long) * size_t(remote::kTraceMaxGrid + remote::kTraceSlots);
  static constexpr size_t kTraceBytes =
      kEndTraceBytes + sizeof(unsigned long long) * size_t(remote::kTraceMaxGrid) * remote::kTileTraceMax;

  World& w;
  int64_t B, H, D, max_S, Hl;
  int P, bm;
  AttentionKernel kernel;
  int kernel_id;  // attention::KernelId of `kernel`
  std::vector<Group> groups;
  const SymmetricBuffer* out = nullptr;
  const SymmetricBuffer* flags = nullptr;
  size_t out_capacity = 0;
  std::optional<UlyssesLayout> layout;
  A2aBuffers a2a_bufs;
  std::map<A2aVersion, std::unique_ptr<A2aOp>> ops;
  std::unique_ptr<ulysses_detail::UlyssesPipeline> pipeline;
  uint64_t epoch = 0;
  // The rate of the path the all-to-all takes (its embedded profile's R),
  // for the pipelined variant's default split only.
  double link_Bps = load_profile(default_ulysses_profile(w.backend(), w.placement())).R_Bps;
  int tiles_per_wave = 0;  // the attention kernel's CTAs the GPU holds at once (set once: device_info is slow)

  std::pair<int, int> default_split(A2aVersion version) const {
    return default_pipeline_split(B, layout->shape().S, Hl, D, groups.front().n, bm, tiles_per_wave, link_Bps,
                                  version);
  }

  Impl(World& world, int64_t B_, int64_t H_, int64_t D_, int64_t S_, AttentionKernel k)
      : w(world), B(B_), H(H_), D(D_), max_S(S_), Hl(H_ / world.size()), P(world.size()), kernel(k) {
    kernel_id = kernel == AttentionKernel::mma_sync ? attention::kKernelMmaSync : attention::kKernelWgmmaPingpong;
    bm = attention::attention_fwd_kernel_shape_of(int(D), kernel_id).block_m;
    tiles_per_wave = device_info(w.device_of(w.local_ranks().front())).sm_count *
                     attention::attention_fwd_ctas_per_sm_of(int(D), kernel_id);
    const size_t shard_elems = size_t(B * max_S * Hl * D);
    const int64_t max_m = (max_S + bm - 1) / bm;
    auto make_group = [&](int rank_base, int n) {
      Group g;
      g.rank_base = rank_base;
      g.n = n;
      g.device = w.device_of(rank_base);
      g.stream = w.stream(rank_base);
      const size_t bytes = shard_elems * 2 * size_t(n);
      g.q = static_cast<uint16_t*>(w.alloc_local(rank_base, bytes));
      g.k = static_cast<uint16_t*>(w.alloc_local(rank_base, bytes));
      g.v = static_cast<uint16_t*>(w.alloc_local(rank_base, bytes));
      g.o = static_cast<uint16_t*>(w.alloc_local(rank_base, bytes));
      for (auto& t : g.order) t = static_cast<int*>(w.alloc_local(rank_base, size_t(P * max_m) * sizeof(int)));
      XSTAGE_CUDA(cudaSetDevice(g.device));
      g.timeout_record =
          static_cast<remote::FlagTimeoutRecord*>(w.alloc_local(rank_base, sizeof(remote::FlagTimeoutRecord)));
      XSTAGE_CUDA(cudaMemset(g.timeout_record, 0, sizeof(remote::FlagTimeoutRecord)));
      if (experiment_bits() & (remote::kDiagTrace | remote::kDiagTileTrace))
        g.trace = static_cast<unsigned long long*>(w.alloc_local(rank_base, kTraceBytes));
      groups.push_back(g);
    };
    if (w.backend() == Backend::emulated)
      make_group(0, P);
    else
      for (int r : w.local_ranks()) make_group(r, 1);
    out_capacity = UlyssesLayout({B, max_S, H, D, P, 2}).max_shard_bytes();
    out = &w.alloc_symmetric(out_capacity);
    const int64_t flag_slots = P * B * Hl * int64_t(ulysses::ulysses_flag_stride((max_S + P - 1) / P, bm));
    // The receiver wait indexes the flags of all P ranks in 32 bits (device/ulysses/destination.cuh, ReceiverFlags).
    if (flag_slots * P > std::numeric_limits<int32_t>::max())
      throw Error(fmt::format("ulysses: {} completion flags a rank x {} ranks do not fit the 32-bit indices of the "
                              "receiver wait; expected at most {} in all (smaller B, H or S)",
                              flag_slots, P, std::numeric_limits<int32_t>::max()));
    flags = &w.alloc_flags(size_t(flag_slots));
    std::vector<ulysses_detail::PipelineGroup> pg;
    for (const Group& g : groups) pg.push_back({g.rank_base, g.n, g.device, g.stream, g.q, g.k, g.v, g.o});
    pipeline = std::make_unique<ulysses_detail::UlyssesPipeline>(w, std::move(pg), B, Hl, D, kernel, bm);
  }

  const Group& group_of(int rank) const {
    for (const auto& g : groups)
      if (rank >= g.rank_base && rank < g.rank_base + g.n) return g;
    throw Error(fmt::format("ulysses: rank {} is not driven by this process; expected one of its local ranks", rank));
  }
  size_t shard_elems() const { return size_t(B * layout->shape().S * Hl * D); }
  // Rank r's head-sharded tensor within its group's allocation.
  uint16_t* shard(uint16_t* base, int rank, const Group& g) const {
    return base + size_t(rank - g.rank_base) * shard_elems();
  }
  int m_blocks() const { return int((layout->shape().S + bm - 1) / bm); }

  attention::MainloopParams mainloop(const Group& g) const {
    const int64_t S = layout->shape().S;
    attention::MainloopParams p;
    p.q = g.q, p.k = g.k, p.v = g.v;
    p.q_stride_b = p.k_stride_b = p.v_stride_b = S * Hl * D;
    p.q_stride_s = p.k_stride_s = p.v_stride_s = Hl * D;
    p.q_stride_h = p.k_stride_h = p.v_stride_h = D;
    p.B = int(B * g.n), p.H = int(Hl), p.S_q = p.S_kv = int(S), p.D = int(D);
    p.scale_log2 = float(1.0 / std::sqrt(double(D)) * kLog2e);
    return p;
  }

  ulysses::UlyssesStoreParams store_params(const Group& g) const {
    ulysses::UlyssesStoreParams ep;
    const int li = w.local_index(g.rank_base);
    ep.out = out->device_table(li);
    ep.flags = reinterpret_cast<uint64_t* const*>(flags->device_table(li));
    ep.P = P, ep.rank_base = g.rank_base, ep.batch = int(B), ep.heads_per_rank = int(Hl), ep.head_dim = int(D);
    ep.S = layout->shape().S, ep.chunk = layout->chunk_rows();
    ep.flag_stride = ulysses::ulysses_flag_stride(ep.chunk, bm);
    ep.epoch = epoch;
    return ep;
  }

  void launch_local_attention(const Group& g) {
    const int64_t S = layout->shape().S;
    AttentionForwardArgs a;
    a.B = int(B * g.n), a.H = int(Hl), a.S_q = a.S_kv = int(S), a.D = int(D);
    a.q = g.q, a.k = g.k, a.v = g.v, a.o = g.o;
    a.q_stride = a.k_stride = a.v_stride = a.o_stride = contiguous_bshd(int(S), int(Hl), int(D));
    // The kernel the fused variants run, so that attention-only is their floor.
    a.kernel = kernel;
    attention_forward(a, g.stream);
  }

  void launch_fused(Group& g, const UlyssesRun& run) {
    const auto p = mainloop(g);
    auto ep = store_params(g);
    sched::OrderedSchedulerParams sp;
    sp.order = g.order[run.order == TileOrder::linear ? 0 : 1];
    sp.batch = int(B), sp.rank_base = g.rank_base;
    const StorePath store = run.store.value_or(default_store_path(kernel, run.variant, run.flags));
    if (run.paced_rows < 0)
      throw Error(fmt::format("ulysses: paced rows: expected >= 0 (0: the default {}), got {}", kDefaultPacedRows,
                              run.paced_rows));
    // Slices of more rows than a tile has send it whole: the cap changes
    // nothing else and keeps the kernels' rows + paced_min_rows - 1 in range.
    ep.paced_min_rows = std::min(run.paced_rows > 0 ? run.paced_rows : kDefaultPacedRows, bm);
    const Completion completion = run.variant == UlyssesVariant::coupled ? Completion::coupled : run.flags;
    if ((experiment_bits() & remote::kDiagTileTrace) && store != StorePath::vector16 && store != StorePath::bulk)
      throw Error(fmt::format("XSTAGE_ULYSSES_EXPERIMENT: the tile trace ({}) with store path {}; expected the vector16 "
                              "or bulk store path, the ones it stamps", remote::kDiagTileTrace, to_string(store)));
    if (const auto why = ulysses_combination_error(store, run.variant, run.flags, kernel))
      throw Error(fmt::format("ulysses: {} with store path {} and {} flags: {}; expected a combination the kernel runs",
                              to_string(run.variant), to_string(store), to_string(run.flags), *why));
    // The grid's last CTA waits for the flags of the ranks this launch
    // receives for (device/remote/receive.cuh): the receiver side.
    ep.receive = 1;
    ep.timeout_record = g.timeout_record;
    ep.recv_rank_first = g.rank_base, ep.recv_ranks = g.n;
    ep.block_m = bm;
    ep.timeout_ns = static_cast<uint64_t>(run.timeout_s * 1e9);
    ep.recv_epoch = run.test_receivers_time_out ? ep.epoch + 1000 : ep.epoch;
#ifdef XSTAGE_DIAGNOSTICS  // else experiment_bits() is 0 and g.trace null: the parameters have no such members
    ep.experiment = experiment_bits();
    if (g.trace != nullptr) {
      // The tile stamps (8 MiB) are cleared only when they are asked for: this
      // memset runs inside the timed rounds.
      const bool tiles = (experiment_bits() & remote::kDiagTileTrace) != 0;
      XSTAGE_CUDA(cudaMemsetAsync(g.trace, 0, tiles ? kTraceBytes : kEndTraceBytes, g.stream));
      g.tile_trace_pending = tiles;
      ep.trace = g.trace;
    }
#endif
    check_cuda(ulysses::launch_ulysses_attention(p, ep, sp, store, completion, kernel_id, g.stream),
               fmt::format("fused Ulysses attention launch ({} kernel, ranks {}..{}, S = {}, D = {})",
                           to_string(kernel), g.rank_base, g.rank_base + g.n - 1, p.S_q, D)
                   .c_str(),
               __FILE__, __LINE__);
  }
};

UlyssesAttention::UlyssesAttention(World& world, int64_t B, int64_t H, int64_t D, int64_t max_S,
                                   AttentionKernel kernel) {
  check_shape(world, B, H, D, max_S);
  if (kernel != AttentionKernel::mma_sync && kernel != AttentionKernel::wgmma_pingpong)
    throw Error(fmt::format("ulysses: attention kernel {}: expected mma or wgmma (wgmma-pingpong)", to_string(kernel)));
  impl_ = std::make_unique<Impl>(world, B, H, D, max_S, kernel);
}

UlyssesAttention::~UlyssesAttention() = default;

const UlyssesLayout& UlyssesAttention::layout() const {
  if (!impl_->layout) throw Error("ulysses: no sequence length selected; expected set_sequence first");
  return *impl_->layout;
}

void UlyssesAttention::set_sequence(int64_t S) {
  Impl& m = *impl_;
  if (S < 1 || S > m.max_S)
    throw Error(fmt::format("ulysses: S = {}: expected 1 .. {} (the size the buffers were made for)", S, m.max_S));
  m.ops.clear();
  m.layout.emplace(UlyssesShape{m.B, S, m.H, m.D, m.P, 2});
  // Drops the plans of the last S; a plan reads the all-to-all buffers set below when it is built.
  m.pipeline->set_sequence(*m.layout, m.a2a_bufs);
  for (const auto& g : m.groups) {
    XSTAGE_CUDA(cudaSetDevice(g.device));
    for (TileOrder o : {TileOrder::linear, TileOrder::rotated}) {
      std::vector<int> table;
      for (int r = 0; r < m.P; ++r) {
        const auto t = ulysses_tile_order(*m.layout, m.bm, o, r);
        table.insert(table.end(), t.begin(), t.end());
      }
      XSTAGE_CUDA(cudaMemcpy(g.order[o == TileOrder::linear ? 0 : 1], table.data(), table.size() * sizeof(int),
                             cudaMemcpyHostToDevice));
    }
    // From pageable memory cudaMemcpy may return before the copy lands, and
    // the world's streams do not wait for the legacy stream.
    XSTAGE_CUDA(cudaDeviceSynchronize());
  }
  m.a2a_bufs = A2aBuffers{};
  m.a2a_bufs.input.assign(size_t(m.P), nullptr);
  for (int r : m.w.local_ranks()) m.a2a_bufs.input[size_t(r)] = m.shard(m.group_of(r).o, r, m.group_of(r));
  m.a2a_bufs.output = m.out;
  m.a2a_bufs.shard_capacity = m.out_capacity;
  if (m.w.backend() == Backend::nccl) {
    m.a2a_bufs.stage_capacity = nccl_stage_bytes(*m.layout);
    m.a2a_bufs.send_stage.assign(size_t(m.P), nullptr);
    m.a2a_bufs.recv_stage.assign(size_t(m.P), nullptr);
    // Staging for NCCL's all-to-all, made once per size (the world owns it).
    for (int r : m.w.local_ranks()) {
      m.a2a_bufs.send_stage[size_t(r)] = m.w.alloc_local(r, m.a2a_bufs.stage_capacity);
      m.a2a_bufs.recv_stage[size_t(r)] = m.w.alloc_local(r, m.a2a_bufs.stage_capacity);
    }
  }
  for (A2aVersion v : available_versions(m.w.backend()))
    m.ops.emplace(v, std::make_unique<A2aOp>(m.w, m.a2a_bufs, *m.layout, A2aDirection::heads_to_seq, v));
}

void UlyssesAttention::fill_inputs(uint64_t seed) {
  Impl& m = *impl_;
  (void)layout();
  const size_t n = m.shard_elems();
  for (const auto& g : m.groups) {
    XSTAGE_CUDA(cudaSetDevice(g.device));
    for (int r = g.rank_base; r < g.rank_base + g.n; ++r) {
      uint16_t* dst[3] = {m.shard(g.q, r, g), m.shard(g.k, r, g), m.shard(g.v, r, g)};
      for (int t = 0; t < 3; ++t)
        check_cuda(fill::launch_fill_random_bf16(dst[t], n, seed, uint64_t(3 * r + t), 0, g.stream),
                   "fill_random_bf16 launch", __FILE__, __LINE__);
    }
    XSTAGE_CUDA(cudaStreamSynchronize(g.stream));
  }
  m.w.barrier();
}

void UlyssesAttention::enqueue(const UlyssesRun& run) {
  Impl& m = *impl_;
  (void)layout();
  switch (run.variant) {
    case UlyssesVariant::attention_only:
      for (const auto& g : m.groups) {
        XSTAGE_CUDA(cudaSetDevice(g.device));
        m.launch_local_attention(g);
      }
      break;
    case UlyssesVariant::sequential: {
      auto it = m.ops.find(run.a2a);
      if (it == m.ops.end())
        throw Error(fmt::format("ulysses: the {} all-to-all is not available on the {} backend; expected a version the backend "
                                "has", to_string(run.a2a),
                                to_string(m.w.backend())));
      for (const auto& g : m.groups) {
        XSTAGE_CUDA(cudaSetDevice(g.device));
        m.launch_local_attention(g);
      }
      // Emulated ranks computed on the lead stream; their copies run on the
      // ranks' own streams, which must wait for it.
      if (m.w.backend() == Backend::emulated) m.w.fork();
      it->second->enqueue();
      break;
    }
    case UlyssesVariant::pipelined:
      if (run.chunks < 0)
        throw Error(fmt::format("ulysses: pipelined chunks: expected 1 .. {} (0: the default), got {}", m.Hl,
                                run.chunks));
      if (run.row_chunks < 0)
        throw Error(fmt::format("ulysses: pipelined row chunks: expected 1 .. {} (0: the default), got {}",
                                kMaxPipelineChunks, run.row_chunks));
      if (run.chunks == 0 && run.row_chunks == 0) {
        const auto [hc, rc] = m.default_split(run.a2a);
        m.pipeline->enqueue(run.a2a, hc, rc, run.graph);
      } else {
        m.pipeline->enqueue(run.a2a, std::max(run.chunks, 1), std::max(run.row_chunks, 1), run.graph);
      }
      break;
    case UlyssesVariant::fused:
    case UlyssesVariant::coupled:
      ++m.epoch;
      for (auto& g : m.groups) {
        XSTAGE_CUDA(cudaSetDevice(g.device));
        m.launch_fused(g, run);
      }
      break;
  }
}

void UlyssesAttention::run(const UlyssesRun& r) {
  impl_->w.fork();
  enqueue(r);
  impl_->w.join();
  impl_->w.barrier();
  check_receivers();
}

namespace {

// kDiagTileTrace: every CTA's tile ends of one fused launch, appended to the
// CSV file XSTAGE_TILE_TRACE names (S, device, launch, cta, tile, end_ns; ns
// from the launch's first tile end; `launch` counts this group's traced
// launches). Without the variable nothing is written.
void dump_tile_trace(int device, const unsigned long long* trace, int64_t S, int64_t launch) {
  const char* path = std::getenv("XSTAGE_TILE_TRACE");
  if (path == nullptr || *path == 0) return;
  const size_t n = size_t(remote::kTraceMaxGrid) * remote::kTileTraceMax;
  std::vector<unsigned long long> t(n);
  XSTAGE_CUDA(cudaSetDevice(device));
  XSTAGE_CUDA(cudaMemcpy(t.data(), trace + remote::kTraceMaxGrid + remote::kTraceSlots, n * sizeof(t[0]),
                         cudaMemcpyDeviceToHost));
  unsigned long long first = ~0ull;
  int full = 0;  // CTAs whose every slot is used: their later tiles were not stamped
  for (int c = 0; c < remote::kTraceMaxGrid; ++c) {
    for (int k = 0; k < remote::kTileTraceMax; ++k)
      if (t[size_t(c) * remote::kTileTraceMax + size_t(k)] != 0)
        first = std::min(first, t[size_t(c) * remote::kTileTraceMax + size_t(k)]);
    full += t[size_t(c) * remote::kTileTraceMax + remote::kTileTraceMax - 1] != 0;
  }
  if (first == ~0ull) return;
  if (full > 0)
    fmt::print(stderr, "XSTAGE_TILE_TRACE: S {}: {} CTAs ran more than {} tiles; their later tiles are not in the trace\n",
               S, full, remote::kTileTraceMax);
  std::FILE* f = std::fopen(path, "a");
  if (f == nullptr) throw Error(fmt::format("XSTAGE_TILE_TRACE: cannot open {} for appending; expected a writable path", path));
  for (int c = 0; c < remote::kTraceMaxGrid; ++c)
    for (int k = 0; k < remote::kTileTraceMax; ++k) {
      const unsigned long long x = t[size_t(c) * remote::kTileTraceMax + size_t(k)];
      if (x != 0) fmt::print(f, "{},{},{},{},{},{}\n", S, device, launch, c, k, x - first);
    }
  std::fclose(f);
}

}  // namespace

void UlyssesAttention::check_receivers() const {
  for (auto& g : impl_->groups) {  // the tile trace's bookkeeping changes
    if (g.tile_trace_pending) {  // written once a launch, whatever calls this afterwards
      dump_tile_trace(g.device, g.trace, layout().shape().S, g.tile_trace_launches++);
      g.tile_trace_pending = false;
    }
    if (g.trace != nullptr && (experiment_bits() & remote::kDiagTrace)) {  // what the last fused launch's end looked like
      std::vector<unsigned long long> t(size_t(remote::kTraceMaxGrid + remote::kTraceSlots));
      XSTAGE_CUDA(cudaSetDevice(g.device));
      XSTAGE_CUDA(cudaMemcpy(t.data(), g.trace, t.size() * sizeof(t[0]), cudaMemcpyDeviceToHost));
      std::vector<unsigned long long> done;
      for (int i = 0; i < remote::kTraceMaxGrid; ++i)
        if (t[size_t(i)] != 0) done.push_back(t[size_t(i)]);
      std::sort(done.begin(), done.end());
      const unsigned long long* w = t.data() + remote::kTraceMaxGrid;
      if (!done.empty()) {
        const auto signed_ns = [](unsigned long long a, unsigned long long b) {
          return static_cast<long long>(a) - static_cast<long long>(b);
        };
        fmt::print(stderr,
                   "trace: {} CTAs published over {} ns (last two {} ns apart); wait began {} ns after the last "
                   "publish, its loop done {} ns after it; first flag back after {} cycles, loop done after {}, "
                   "fence done after {}; {} loads, {} sleeps\n",
                   done.size(), done.back() - done.front(), done.size() > 1 ? done.back() - done[done.size() - 2] : 0,
                   signed_ns(w[0], done.back()), w[6] != 0 ? signed_ns(w[6], done.back()) : 0, w[1], w[2], w[3], w[5],
                   w[4]);
      }
    }
    XSTAGE_CUDA(cudaSetDevice(g.device));
    const remote::FlagTimeoutRecord r = fetch_timeout_record(g.timeout_record);
    if (r.set == 0) continue;
    XSTAGE_CUDA(cudaMemset(g.timeout_record, 0, sizeof(r)));  // reported once
    throw Error(describe_ulysses_timeout(&r));
  }
}

void UlyssesAttention::poison_outputs() {
  Impl& m = *impl_;
  (void)layout();  // throws before set_sequence
  const std::vector<uint8_t> poison(std::max(m.out_capacity, m.shard_elems() * 2), 0xFF);
  for (int r : m.w.local_ranks()) {
    XSTAGE_CUDA(cudaSetDevice(m.w.device_of(r)));
    XSTAGE_CUDA(cudaMemcpy(m.out->ptrs[size_t(r)], poison.data(), m.out_capacity, cudaMemcpyDefault));
    const auto& g = m.group_of(r);
    XSTAGE_CUDA(cudaMemcpy(m.shard(g.o, r, g), poison.data(), m.shard_elems() * 2, cudaMemcpyDefault));
    XSTAGE_CUDA(cudaDeviceSynchronize());
  }
  m.w.barrier();  // every destination is poisoned before anyone writes
}

std::vector<uint16_t> UlyssesAttention::download_output(int rank) const {
  const Impl& m = *impl_;
  std::vector<uint16_t> h(layout().seq_shard_bytes(rank) / 2);
  XSTAGE_CUDA(cudaSetDevice(m.w.device_of(rank)));
  XSTAGE_CUDA(cudaMemcpy(h.data(), m.out->ptrs[size_t(rank)], h.size() * 2, cudaMemcpyDefault));
  return h;
}

std::vector<uint16_t> UlyssesAttention::download_local_attention(int rank) const {
  const Impl& m = *impl_;
  const auto& g = m.group_of(rank);
  std::vector<uint16_t> h(m.shard_elems());
  XSTAGE_CUDA(cudaSetDevice(g.device));
  XSTAGE_CUDA(cudaMemcpy(h.data(), m.shard(g.o, rank, g), h.size() * 2, cudaMemcpyDeviceToHost));
  return h;
}

std::string UlyssesAttention::check_against_local(const UlyssesRun& run) {
  Impl& m = *impl_;
  if (run.variant == UlyssesVariant::attention_only)
    throw Error("ulysses: attention-only writes no sequence-sharded output; expected sampled_rel_error to check it");
  const UlyssesLayout& l = layout();
  const int64_t S = l.shape().S, c = l.chunk_rows();
  const std::vector<int>& local = m.w.local_ranks();
  auto all_local = [&] { return int(local.size()) == m.P; };

  // 1. Local results of every local rank (head-sharded).
  poison_outputs();
  this->run({UlyssesVariant::attention_only});
  std::map<int, std::vector<uint16_t>> head_sharded;
  for (int r : local) head_sharded[r] = download_local_attention(r);

  // 2. The reference of every local destination: the local results permuted
  //    on the CPU when every source is in this process, else (one process per
  //    rank) the sequential variant's output, itself checked on the rows this
  //    process computed.
  std::map<int, std::vector<uint16_t>> want;
  auto permuted_value = [&](int d, int64_t b, int64_t i, int64_t hg, int64_t col) -> std::optional<uint16_t> {
    const int src = int(hg / m.Hl);
    auto it = head_sharded.find(src);
    if (it == head_sharded.end()) return std::nullopt;
    const int64_t s = d * c + i;
    return it->second[size_t(((b * S + s) * m.Hl + hg % m.Hl) * m.D + col)];
  };
  auto compare = [&](int d, const std::vector<uint16_t>& got, auto&& expected) -> std::string {
    const int64_t S_d = l.seq_rows(d);
    for (int64_t b = 0; b < m.B; ++b)
      for (int64_t i = 0; i < S_d; ++i)
        for (int64_t hg = 0; hg < m.H; ++hg)
          for (int64_t col = 0; col < m.D; ++col) {
            const std::optional<uint16_t> e = expected(d, b, i, hg, col);
            if (!e) continue;
            const uint16_t g = got[size_t(((b * S_d + i) * m.H + hg) * m.D + col)];
            if (g != *e)
              return fmt::format("rank {}: b {}, row {} (global {}), head {}, column {}: expected bf16 0x{:04x}, got "
                                 "0x{:04x}{}",
                                 d, b, i, d * c + i, hg, col, *e, g, g == 0xFFFF ? " (the poison: never written)" : "");
          }
    return "";
  };
  const bool via_sequential = !all_local() || run.variant == UlyssesVariant::sequential;
  if (via_sequential) {
    UlyssesRun seq{UlyssesVariant::sequential};
    seq.a2a = run.variant == UlyssesVariant::sequential ? run.a2a : available_versions(m.w.backend()).front();
    poison_outputs();
    this->run(seq);
    std::string bad;
    for (int d : local) {
      want[d] = download_output(d);
      if (bad.empty()) bad = compare(d, want[d], permuted_value);
    }
    if (!bad.empty()) bad = fmt::format("sequential ({}) vs the local results: {}", to_string(seq.a2a), bad);
    bad = agree_on_failure(bad);  // every process stops together, or none does
    if (!bad.empty() || run.variant == UlyssesVariant::sequential) return bad;
  }

  // 3. The variant, against the reference; then its flags.
  poison_outputs();
  this->run(run);
  std::string bad;
  for (int d : local) {
    if (!bad.empty()) break;
    const auto got = download_output(d);
    if (via_sequential) {
      const auto& ref = want[d];
      bad = compare(d, got, [&](int, int64_t b, int64_t i, int64_t hg, int64_t col) -> std::optional<uint16_t> {
        return ref[size_t(((b * l.seq_rows(d) + i) * m.H + hg) * m.D + col)];
      });
    } else {
      bad = compare(d, got, permuted_value);
    }
    if (bad.empty() && is_fused(run.variant)) bad = check_flags(d);
  }
  if (!bad.empty()) bad = fmt::format("{}: {}", to_string(run.variant), bad);
  return agree_on_failure(bad);
}

std::string UlyssesAttention::check_flags(int d) const {
  const Impl& m = *impl_;
  const UlyssesLayout& l = layout();
  const int64_t chunk = l.chunk_rows();
  const int stride = ulysses::ulysses_flag_stride(chunk, m.bm);
  std::vector<uint64_t> flags(size_t(m.P * m.B * m.Hl) * size_t(stride));
  XSTAGE_CUDA(cudaSetDevice(m.w.device_of(d)));
  XSTAGE_CUDA(cudaMemcpy(flags.data(), m.flags->ptrs[size_t(d)], flags.size() * sizeof(uint64_t), cudaMemcpyDefault));
  const remote::RankRange mine = ulysses::ulysses_receiver_m_blocks(d, m.bm, l.shape().S, chunk);
  for (int src = 0; src < m.P; ++src)
    for (int b = 0; b < int(m.B); ++b)
      for (int h = 0; h < int(m.Hl); ++h)
        for (int j = 0; j < stride; ++j) {  // slot j of the stream: m-block mine.first + j
          const int mb = mine.first + j;
          const int64_t stream = ulysses::ulysses_stream_index(src, b, h, int(m.B), int(m.Hl));
          const uint64_t v = flags[size_t(stream * stride + j)];
          const bool expected = mb <= mine.last;  // none for a rank without rows (last < first)
          if (expected != (v == m.epoch))
            return fmt::format("rank {}: the flag of (source {}, b {}, head {}, m-block {}) holds {}; this run's "
                               "epoch is {}, and {}",
                               d, src, b, h, mb, v, m.epoch,
                               expected ? "that tile's rows go to this rank"
                                        : "the slot is past the m-blocks of this rank's rows (no tile sets it)");
        }
  return "";
}

std::string UlyssesAttention::agree_on_failure(const std::string& bad) const {
  if (impl_->w.max_over_ranks(bad.empty() ? 0.0 : 1.0) == 0) return "";
  return bad.empty() ? "another rank's check failed (its message says where)" : bad;
}

double UlyssesAttention::sampled_rel_error(uint64_t seed, int rows, uint64_t sample_seed) const {
  const Impl& m = *impl_;
  const UlyssesLayout& l = layout();
  const int64_t S = l.shape().S, c = l.chunk_rows(), D = m.D, Hl = m.Hl;
  std::mt19937_64 rng(sample_seed);
  const double scale = 1.0 / std::sqrt(double(D));
  auto input = [&](int t, int64_t b, int64_t s, int64_t hg, int64_t d) {
    const int r = int(hg / Hl);
    const uint64_t i = uint64_t(((b * S + s) * Hl + hg % Hl) * D + d);
    return double(bf16_to_float(float_to_bf16(fill::fill_random_value(seed, uint64_t(3 * r + t), i))));
  };
  double err2 = 0, ref2 = 0;
  for (int d : m.w.local_ranks()) {
    const int64_t S_d = l.seq_rows(d);
    if (S_d == 0) continue;
    const auto got = download_output(d);
    for (int n = 0; n < rows; ++n) {
      const int64_t b = int64_t(rng() % uint64_t(m.B)), i = int64_t(rng() % uint64_t(S_d)),
                    hg = int64_t(rng() % uint64_t(m.H));
      const int64_t s = d * c + i;
      std::vector<double> q(static_cast<size_t>(D)), acc(static_cast<size_t>(D), 0.0), sc(static_cast<size_t>(S));
      for (int64_t x = 0; x < D; ++x) q[size_t(x)] = input(0, b, s, hg, x);
      double mx = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t x = 0; x < D; ++x) dot += q[size_t(x)] * input(1, b, j, hg, x);
        sc[size_t(j)] = dot * scale;
        mx = std::max(mx, sc[size_t(j)]);
      }
      double sum = 0;
      for (int64_t j = 0; j < S; ++j) {
        const double p = std::exp(sc[size_t(j)] - mx);
        sum += p;
        for (int64_t x = 0; x < D; ++x) acc[size_t(x)] += p * input(2, b, j, hg, x);
      }
      for (int64_t x = 0; x < D; ++x) {
        const double ref = acc[size_t(x)] / sum;
        const double o = double(bf16_to_float(got[size_t(((b * S_d + i) * m.H + hg) * D + x)]));
        err2 += (o - ref) * (o - ref);
        ref2 += ref * ref;
      }
    }
  }
  return ref2 > 0 ? std::sqrt(err2 / ref2) : (err2 > 0 ? INFINITY : 0.0);
}

void UlyssesAttention::dump_npy(const std::string& dir, uint64_t seed) const {
  const Impl& m = *impl_;
  const UlyssesLayout& l = layout();
  if (int(m.w.local_ranks().size()) != m.P)
    throw Error("ulysses --dump: some ranks' output is in other processes; expected every rank in this process "
                "(emulated or peer backend)");
  const int64_t S = l.shape().S, B = m.B, H = m.H, D = m.D, Hl = m.Hl;
  const std::vector<size_t> shape = {size_t(B), size_t(S), size_t(H), size_t(D)};
  std::vector<float> t(size_t(B * S * H * D));
  const char* names[3] = {"q", "k", "v"};
  for (int k = 0; k < 3; ++k) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < D; ++d) {
            const uint64_t i = uint64_t(((b * S + s) * Hl + h % Hl) * D + d);
            t[size_t(((b * S + s) * H + h) * D + d)] =
                bf16_to_float(float_to_bf16(fill::fill_random_value(seed, uint64_t(3 * (h / Hl) + k), i)));
          }
    write_npy(dir + "/" + names[k] + ".npy", shape, t.data());
  }
  for (int r = 0; r < m.P; ++r) {
    const auto o = download_output(r);
    const int64_t S_r = l.seq_rows(r), begin = l.seq_begin(r);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < S_r; ++i)
        for (int64_t x = 0; x < H * D; ++x)
          t[size_t((b * S + begin + i) * H * D + x)] = bf16_to_float(o[size_t((b * S_r + i) * H * D + x)]);
  }
  write_npy(dir + "/o.npy", shape, t.data());
}

int64_t UlyssesAttention::tiles_per_gpu() const {
  const Impl& m = *impl_;
  return int64_t(m.groups.front().n) * m.B * m.Hl * m.m_blocks();
}

int UlyssesAttention::concurrent_tiles_per_gpu() const { return impl_->tiles_per_wave; }

int UlyssesAttention::block_m() const { return impl_->bm; }

const SymmetricBuffer& UlyssesAttention::output_buffer() const { return *impl_->out; }

const SymmetricBuffer& UlyssesAttention::flag_buffer() const { return *impl_->flags; }

uint64_t UlyssesAttention::epoch() const { return impl_->epoch; }

World& UlyssesAttention::world() const { return impl_->w; }

AttentionKernel UlyssesAttention::kernel() const { return impl_->kernel; }

}  // namespace xstage
