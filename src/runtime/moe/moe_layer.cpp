// The MoE layer on a World (include/xstage/moe/moe_layer.hpp): the fit check, the
// buffers, the caller's accessors. Runs: moe_layer_run.cpp; what a run
// leaves to read: moe_layer_report.cpp; layouts: docs/design/moe-layer.md.
#include <cuda_runtime.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "device/moe/fused_layer_launch.hpp"
#include "device/moe/layer_comm_launch.hpp"
#include "runtime/moe/moe_layer_impl.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/core/units.hpp"

namespace xstage {

namespace {

// Free memory a layer leaves to the CUDA runtime, NCCL and the caller's
// other buffers on each GPU (and to the system, of pinned host memory).
constexpr size_t kDeviceReserve = size_t(256) << 20;
constexpr size_t kHostReserve = size_t(1) << 30;

// MemAvailable of /proc/meminfo in bytes; 0 when it cannot be read.
size_t host_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

std::string describe_sizes(const MoeLayerSizes& z) {
  return fmt::format(
      "per rank: local {} (pool_x {}, pool_h {}, pool_out {}, row_meta {}, weights {}, workspace {}, output {}), "
      "symmetric {} (x_send {}, routes {}, counts {}, combine {}, flags {}); rows_cap {}",
      format_bytes(double(z.local_total())), format_bytes(double(z.pool_x)), format_bytes(double(z.pool_h)),
      format_bytes(double(z.pool_out)), format_bytes(double(z.row_meta)), format_bytes(double(z.weights)),
      format_bytes(double(z.workspace)), format_bytes(double(z.output)), format_bytes(double(z.symmetric_total())),
      format_bytes(double(z.x_send)), format_bytes(double(z.routes)), format_bytes(double(z.counts)),
      format_bytes(double(z.combine)), format_bytes(double(z.flags)), z.rows_cap);
}

// "" when the layer fits this process's GPUs (and host memory), else why not.
std::string fit_problem(World& w, const MoeLayerSizes& z, const std::string& what) {
  std::map<int, int> ranks_on;  // device -> local ranks on it
  for (int r : w.local_ranks()) ++ranks_on[w.device_of(r)];
  const bool host = w.placement() == Placement::host;
  for (const auto& [device, n] : ranks_on) {
    const size_t need = size_t(n) * (z.local_total() + (host ? 0 : z.symmetric_total()));
    XSTAGE_CUDA(cudaSetDevice(device));
    size_t free_b = 0, total_b = 0;
    XSTAGE_CUDA(cudaMemGetInfo(&free_b, &total_b));
    if (need + kDeviceReserve > free_b)
      return fmt::format(
          "{} does not fit GPU {}: {} rank(s) need {} of device memory{}, plus {} left to the runtime; "
          "{} of {} is free ({}); expected a layer that fits (fewer tokens, ranks per GPU or experts)",
          what, device, n, format_bytes(double(need)), host ? "" : " (symmetric buffers included)",
          format_bytes(double(kDeviceReserve)), format_bytes(double(free_b)), format_bytes(double(total_b)),
          describe_sizes(z));
  }
  if (host) {
    const size_t need = w.local_ranks().size() * z.symmetric_total();
    const size_t avail = host_available_bytes();
    if (avail > 0 && need + kHostReserve > avail)
      return fmt::format(
          "{} does not fit host memory: {} rank(s) need {} of pinned host memory (host placement), "
          "plus {} left to the system; MemAvailable is {} ({}); expected a layer that fits (fewer tokens or "
          "ranks, or --placement device)",
          what, w.local_ranks().size(), format_bytes(double(need)), format_bytes(double(kHostReserve)),
          format_bytes(double(avail)), describe_sizes(z));
  }
  return "";
}

}  // namespace

template <class T>
T* MoeLayer::Impl::alloc(int device, size_t count) {
  XSTAGE_CUDA(cudaSetDevice(device));
  void* p = nullptr;
  const size_t bytes = std::max<size_t>(count * sizeof(T), 16);
  XSTAGE_CUDA(cudaMalloc(&p, bytes));
  device_mem.emplace_back(device, p);
  XSTAGE_CUDA(cudaMemset(p, 0, bytes));  // counters, records and metadata start at zero
  return static_cast<T*>(p);
}

MoeLayer::Impl::Impl(World& world, const MoeLayerOptions& options) : w(world), o(options) {
  // A failed allocation or event throws out of a half-built object, whose
  // destructor never runs: what was made so far is released here.
  try {
    init();
  } catch (...) {
    release();
    throw;
  }
}

void MoeLayer::Impl::init() {
  P = w.size();
  tile = moe_layer_tile(o, P);  // validates
  z = moe_layer_sizes(o, P);
  E = o.shape.experts, E_loc = E / P, k = o.shape.topk, H = o.shape.hidden, I = o.shape.inter;
  T_max = o.tokens_max;
  rows_cap = z.rows_cap;
  const std::string what =
      fmt::format("MoE layer ({} {}/{}/{}/{}, T_max {}, P = {}, {})", o.shape.name, H, I, E, k, T_max, P, w.describe());

  if (w.backend() == Backend::emulated)
    groups.push_back(Group{0, P});
  else
    for (int r : w.local_ranks()) groups.push_back(Group{r, 1});
  for (Group& g : groups) {
    g.device = w.device_of(g.rank0);
    g.stream = w.stream(g.rank0);
    g.sms = device_info(g.device).sm_count;
    if (moe::moe_pull_smem_bytes(g.n, P, E_loc) > moe::moe_pull_max_smem_bytes())
      throw Error(
          fmt::format("{}: the dispatch plan of {} rank(s) x {} sources x {} experts takes {} of shared memory, "
                      "above the {} a CTA gets; expected fewer emulated ranks or experts",
                      what, g.n, P, E_loc, format_bytes(double(moe::moe_pull_smem_bytes(g.n, P, E_loc))),
                      format_bytes(double(moe::moe_pull_max_smem_bytes()))));
  }

  // Every rank agrees before the collective allocations: one rank throwing
  // alone would leave the others waiting in them.
  const std::string bad = fit_problem(w, z, what);
  if (w.max_over_ranks(bad.empty() ? 0.0 : 1.0) > 0)
    throw Error(bad.empty() ? what + ": another rank does not fit; expected every rank to fit (its message says where)" : bad);

  x_send = &w.alloc_symmetric(z.x_send);
  routes = &w.alloc_symmetric(z.routes);
  counts = &w.alloc_symmetric(z.counts);
  combine = &w.alloc_symmetric(z.combine);
  flags = &w.alloc_flags(size_t(moe::layer_flag_count(P)));

  const int block_m = moe::fused_layer_block_m(fused_tile_id(tile));
  for (Group& g : groups) {
    const int d = g.device;
    const size_t n = size_t(g.n), rows = n * size_t(rows_cap), pairs = n * size_t(T_max) * size_t(k);
    g.w13 = alloc<uint16_t>(d, n * E_loc * 2 * size_t(I) * H);
    g.w2 = alloc<uint16_t>(d, n * E_loc * size_t(H) * I);
    g.pool_x = alloc<uint16_t>(d, rows * H);
    g.h = alloc<uint16_t>(d, rows * I);
    g.pool_out = alloc<uint16_t>(d, rows * H);
    g.out = alloc<uint16_t>(d, n * T_max * H);
    g.offs = alloc<int32_t>(d, n * E_loc);
    g.row_weight = alloc<float>(d, rows);
    g.row_dest_rank = alloc<int32_t>(d, rows);
    g.row_dest_slot = alloc<int32_t>(d, rows);
    g.row_perm = alloc<int32_t>(d, rows);
    g.topk_ids = alloc<int32_t>(d, pairs);
    g.topk_weights = alloc<float>(d, pairs);
    g.pos = alloc<int32_t>(d, pairs);
    g.send_base = alloc<int32_t>(d, n * (E + 1));
    g.tokens = alloc<int32_t>(d, n);
    g.route_done = alloc<int32_t>(d, n);
    g.pull_plan = alloc<int32_t>(d, 2 * (n * size_t(E_loc) * P + 1));
    const int E_run = g.n * E_loc;
    g.counters = alloc<int32_t>(d, size_t(moe::fused_layer_counter_ints(E_run, int64_t(rows))));
    g.records = alloc<remote::FlagTimeoutRecord>(d, kWaitCount);
    g.input_error = alloc<moe::RouteInputError>(d, 1);
    g.trace_tiles = std::max(moe::fused_layer_max_tiles(int64_t(rows), E_run, block_m, 2 * I),
                             moe::fused_layer_max_tiles(int64_t(rows), E_run, block_m, H));
    g.trace = alloc<uint64_t>(d, 2 * size_t(g.trace_tiles) * 4);
    for (void** p : {reinterpret_cast<void**>(&g.host_counts), reinterpret_cast<void**>(&g.host_send_base)}) {
      XSTAGE_CUDA(cudaHostAlloc(p, n * std::max<size_t>(size_t(P) * E_loc, size_t(E) + 1) * sizeof(int32_t),
                                cudaHostAllocPortable));
      host_mem.push_back(*p);
    }
    XSTAGE_CUDA(cudaEventCreateWithFlags(&g.counts_ready, cudaEventDisableTiming));
    XSTAGE_CUDA(cudaEventCreateWithFlags(&g.permuted, cudaEventDisableTiming));
    for (cudaEvent_t& e : g.phase) XSTAGE_CUDA(cudaEventCreate(&e));
  }
  copied.assign(size_t(P), nullptr);
  for (int r : w.local_ranks()) {
    XSTAGE_CUDA(cudaSetDevice(w.device_of(r)));
    XSTAGE_CUDA(cudaEventCreateWithFlags(&copied[size_t(r)], cudaEventDisableTiming));
  }
  tokens.assign(size_t(P), T_max);
  for (Group& g : groups) {
    const std::vector<int32_t> t(size_t(g.n), T_max);
    XSTAGE_CUDA(cudaSetDevice(g.device));
    // Every kernel of a run loaded now: under lazy loading a first launch
    // behind a flag wait on this GPU could block the host until the wait
    // times out, before it has enqueued the other GPUs' kernels the wait is for.
    check_cuda(moe::preload_moe_layer_comm_kernels(), "MoE layer: loading the dispatch and combine kernels", __FILE__,
               __LINE__);
    check_cuda(moe::preload_fused_layer(fused_tile_id(tile)), "MoE layer: loading the fused expert kernel", __FILE__,
               __LINE__);
    XSTAGE_CUDA(cudaMemcpy(g.tokens, t.data(), t.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    // The world's streams do not wait for the legacy stream the memsets and copies ran on.
    XSTAGE_CUDA(cudaDeviceSynchronize());
  }
}

MoeLayer::Impl::~Impl() { release(); }

void MoeLayer::Impl::release() noexcept {
  // Errors are ignored: after a failed kernel (an illegal address) every call fails, and the
  // process must still end cleanly.
  for (const Group& g : groups) {
    (void)cudaSetDevice(g.device);
    (void)cudaStreamSynchronize(g.stream);
    for (cudaEvent_t e : {g.counts_ready, g.permuted, g.phase[0], g.phase[1], g.phase[2], g.phase[3]})
      if (e != nullptr) (void)cudaEventDestroy(e);
  }
  for (cudaEvent_t e : copied)
    if (e != nullptr) (void)cudaEventDestroy(e);
  for (auto it = device_mem.rbegin(); it != device_mem.rend(); ++it) {
    (void)cudaSetDevice(it->first);
    (void)cudaFree(it->second);
  }
  for (void* p : host_mem) (void)cudaFreeHost(p);
  (void)cudaGetLastError();
}

MoeLayer::Impl::Group& MoeLayer::Impl::group_of(int rank) {
  for (Group& g : groups)
    if (rank >= g.rank0 && rank < g.rank0 + g.n) return g;
  throw Error(fmt::format("MoE layer: rank {} is not driven by this process; expected one of its ranks: {}", rank,
                          fmt::join(w.local_ranks(), ", ")));
}

MoeLayer::MoeLayer(World& world, const MoeLayerOptions& o) : impl_(std::make_unique<Impl>(world, o)) {}

MoeLayer::~MoeLayer() = default;

const MoeLayerOptions& MoeLayer::options() const { return impl_->o; }
const MoeLayerSizes& MoeLayer::sizes() const { return impl_->z; }
int MoeLayer::experts_per_rank() const { return impl_->E_loc; }
MoeTile MoeLayer::tile() const { return impl_->tile; }

void* MoeLayer::x(int rank) {
  (void)impl_->group_of(rank);
  return impl_->x_send->ptrs.at(size_t(rank));
}

int32_t* MoeLayer::topk_ids(int rank) {
  Impl& m = *impl_;
  return m.group_of(rank).topk_ids + size_t(m.local_in_group(rank)) * m.T_max * m.k;
}

float* MoeLayer::topk_weights(int rank) {
  Impl& m = *impl_;
  return m.group_of(rank).topk_weights + size_t(m.local_in_group(rank)) * m.T_max * m.k;
}

void* MoeLayer::w13(int rank) {
  Impl& m = *impl_;
  return m.group_of(rank).w13 + size_t(m.local_in_group(rank)) * m.E_loc * 2 * m.I * m.H;
}

void* MoeLayer::w2(int rank) {
  Impl& m = *impl_;
  return m.group_of(rank).w2 + size_t(m.local_in_group(rank)) * m.E_loc * m.H * m.I;
}

void MoeLayer::set_tokens(int rank, int T) {
  Impl& m = *impl_;
  Impl::Group& g = m.group_of(rank);
  if (T < 0 || T > m.T_max)
    throw Error(fmt::format("MoE layer: rank {}: tokens T = {}: expected 0 .. T_max = {}", rank, T, m.T_max));
  m.tokens[size_t(rank)] = T;
  m.dispatched = false;  // a compute-only run must not reuse the pool of the old T
  const int32_t t = T;
  XSTAGE_CUDA(cudaSetDevice(g.device));
  // On the rank's stream, after any run still in flight that reads it.
  XSTAGE_CUDA(cudaMemcpyAsync(g.tokens + m.local_in_group(rank), &t, sizeof t, cudaMemcpyHostToDevice, g.stream));
  XSTAGE_CUDA(cudaStreamSynchronize(g.stream));
}

const void* MoeLayer::output(int rank) {
  Impl& m = *impl_;
  return m.group_of(rank).out + size_t(m.local_in_group(rank)) * m.T_max * m.H;
}

void MoeLayer::run(MoeLayerVariant v, const MoeSchedulePlan& plan) { impl_->run(v, plan); }

void MoeLayer::poison_outputs() {
  Impl& m = *impl_;
  for (Impl::Group& g : m.groups) {
    const size_t rows = size_t(g.n) * size_t(m.rows_cap);
    XSTAGE_CUDA(cudaSetDevice(g.device));
    XSTAGE_CUDA(cudaMemsetAsync(g.out, 0xFF, size_t(g.n) * m.T_max * m.H * 2, g.stream));
    XSTAGE_CUDA(cudaMemsetAsync(g.h, 0xFF, rows * m.I * 2, g.stream));
    XSTAGE_CUDA(cudaMemsetAsync(g.pool_out, 0xFF, rows * m.H * 2, g.stream));
    // Other ranks write a combine buffer only after its owner's next route
    // (their pulls wait for it), which comes after this on the owner's stream.
    for (int r = g.rank0; r < g.rank0 + g.n; ++r)
      XSTAGE_CUDA(cudaMemsetAsync(m.combine->ptrs[size_t(r)], 0xFF, m.z.combine, g.stream));
  }
}

void MoeLayer::set_trace(bool on) { impl_->tracing = on; }

}  // namespace xstage
