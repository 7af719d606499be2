// xstage a2a's measurement: a size sweep the nccl-tests way, every version
// and direction per size, CUDA events around each iteration, the median.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "harness/comm/a2a_bench.hpp"
#include "harness/core/timing.hpp"
#include "xstage/comm/a2a.hpp"
#include "xstage/core/error.hpp"

namespace xstage {

double a2a_busbw_factor(Backend b, int ranks) {
  if (b == Backend::emulated) return 1.0;
  return static_cast<double>(ranks - 1) / (static_cast<double>(ranks) * ranks);
}

void validate_a2a_options(A2aBenchOptions& o) {
  resolve_world_ranks(o.world, 8);
  if (!(o.step_factor > 1) || !std::isfinite(o.step_factor))
    throw Error(fmt::format("-f/--stepfactor: expected a factor > 1, got {}", o.step_factor));
  if (o.min_bytes > o.max_bytes)
    throw Error(fmt::format("-b/--minbytes ({:.0f}) is above -e/--maxbytes ({:.0f}); expected -b <= -e", o.min_bytes, o.max_bytes));
  if (o.iters < 1) throw Error(fmt::format("-n/--iters: expected a whole number >= 1, got {}", o.iters));
  if (o.warmup < 0) throw Error(fmt::format("-w/--warmup: expected a whole number >= 0, got {}", o.warmup));
  for (A2aVersion v : o.versions)
    if (v == A2aVersion::nccl && o.world.backend != Backend::nccl)
      throw Error("--versions nccl: NCCL's all-to-all needs --backend nccl; expected --backend nccl or another --versions");
  // The shape checks (H % P among them), with the smallest legal S. The peer
  // backend's P is known once the GPUs are counted (run_a2a_bench repeats this).
  if (o.world.ranks >= 1) UlyssesLayout({o.batch, 1, o.heads, o.head_dim, o.world.ranks, o.elem_bytes});
}

std::vector<UlyssesLayout> a2a_sweep(const A2aBenchOptions& o) {
  std::vector<UlyssesLayout> out;
  const double row = static_cast<double>(o.batch) * o.heads * o.head_dim * o.elem_bytes;
  for (double size = o.min_bytes; size <= o.max_bytes * (1 + 1e-12); size *= o.step_factor) {
    const auto S = static_cast<int64_t>(std::floor(size / row));
    if (S < 1) continue;
    if (!out.empty() && out.back().shape().S == S) continue;
    out.emplace_back(UlyssesShape{o.batch, S, o.heads, o.head_dim, o.world.ranks, o.elem_bytes});
  }
  return out;
}

namespace {

// The copy engine's plain device-to-host copy, the yardstick of the host path.
class D2hReference {
 public:
  D2hReference(World& w, size_t bytes) : w_(w) {
    src_ = w.alloc_local(w.local_ranks().front(), bytes);
    XSTAGE_CUDA(cudaHostAlloc(&dst_, bytes, cudaHostAllocPortable));
  }
  ~D2hReference() { (void)cudaFreeHost(dst_); }
  double time_us(size_t bytes, int warmup, int iters) {
    return median_us(w_, warmup, iters, [&] {
      XSTAGE_CUDA(cudaMemcpyAsync(dst_, src_, bytes, cudaMemcpyDeviceToHost, w_.lead_stream()));
    });
  }

 private:
  World& w_;
  void* src_ = nullptr;
  void* dst_ = nullptr;
};

A2aBenchRow make_row(const World& w, const std::string& version, const std::string& direction, double bytes,
                     double us, double busbw_factor) {
  A2aBenchRow r;
  r.version = version;
  r.direction = direction;
  r.placement = to_string(w.placement());
  r.backend = to_string(w.backend());
  r.ranks = w.size();
  r.bytes = bytes;
  r.time_us = us;
  r.algbw_GBps = bytes / (us * 1e-6) / 1e9;
  r.busbw_GBps = r.algbw_GBps * busbw_factor;
  return r;
}

}  // namespace

A2aBenchReport run_a2a_bench(A2aBenchOptions o) {
  validate_a2a_options(o);
  const int gpus = cuda_device_count();
  if (gpus == 0)
    throw Error("a2a: no CUDA GPU visible; expected one GPU (emulated backend) or one per rank (peer, nccl)");
  if (o.world.ranks < 1) o.world.ranks = gpus;  // peer: every visible GPU
  validate_a2a_options(o);

  const auto sweep = a2a_sweep(o);
  if (sweep.empty())
    throw Error(fmt::format("a2a: -e/--maxbytes {:.0f} is below one sequence row; expected at least B*H*D*e = {} bytes", o.max_bytes,
                            o.batch * o.heads * o.head_dim * o.elem_bytes));
  const auto versions = o.versions.empty() ? available_versions(o.world.backend) : o.versions;
  const auto directions =
      o.directions.empty() ? std::vector{A2aDirection::seq_to_heads, A2aDirection::heads_to_seq} : o.directions;

  auto world = World::create(o.world);
  World& w = *world;
  A2aBenchReport rep;
  rep.leader = w.leader();
  rep.world = w.describe();
  rep.device = device_info(w.device_of(w.local_ranks().front()));

  size_t capacity = 0, stage = 0;
  for (const auto& l : sweep) {
    capacity = std::max(capacity, l.max_shard_bytes());
    if (std::count(versions.begin(), versions.end(), A2aVersion::nccl)) stage = std::max(stage, nccl_stage_bytes(l));
  }
  const A2aBuffers bufs = alloc_a2a_buffers(w, capacity, stage);
  std::unique_ptr<D2hReference> d2h;
  if (w.placement() == Placement::host) d2h = std::make_unique<D2hReference>(w, sweep.back().total_bytes());
  const double busbw = a2a_busbw_factor(w.backend(), w.size());

  for (const auto& l : sweep) {
    const double bytes = static_cast<double>(l.total_bytes());
    if (d2h)
      rep.rows.push_back(make_row(w, "copy-engine-d2h", "d2h", bytes, d2h->time_us(l.total_bytes(), o.warmup, o.iters),
                                  1.0));
    for (A2aVersion v : versions)
      for (A2aDirection d : directions) {
        A2aOp op(w, bufs, l, d, v);
        std::string checked = "-";
        if (o.check) {
          const std::string bad = check_a2a(w, bufs, op, l, d, o.seed);
          if (!bad.empty())
            throw Error(fmt::format("a2a --check: {} {} at S = {} differs from the CPU reference: {}; expected every element to match", to_string(v),
                                    to_string(d), l.shape().S, bad));
          checked = "ok";
        }
        A2aBenchRow row = make_row(w, to_string(v), to_string(d), bytes,
                                   median_us(w, o.warmup, o.iters, [&] { op.enqueue(); }), busbw);
        row.B = l.shape().B, row.S = l.shape().S, row.H = l.shape().H, row.D = l.shape().D;
        row.check = checked;
        rep.rows.push_back(row);
      }
  }
  return rep;
}

}  // namespace xstage
