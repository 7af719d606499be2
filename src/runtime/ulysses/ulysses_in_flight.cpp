// UlyssesAttention::check_flags_in_flight: the ordering of flags and data as
// a consumer outside the kernel sees it, while the kernel still writes.
//
// check_against_local looks at the outputs once everything has landed, so a
// flag published before its tile's rows would still pass there. Here the CPU
// polls the flags in mapped host memory during the run. A DMA write from the
// GPU is coherent with the CPU's caches, so the CPU sees the bytes as they
// arrive over PCIe: when a flag shows the run's epoch, every row of its tile
// must already hold the reference.
#include "xstage/ulysses/ulysses.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "device/ulysses/params.hpp"
#include "runtime/comm/flag_watch.hpp"
#include "xstage/core/error.hpp"

namespace xstage {

namespace {

void* host_view(void* device_ptr, const char* what) {
  cudaPointerAttributes a{};
  XSTAGE_CUDA(cudaPointerGetAttributes(&a, device_ptr));
  if (a.hostPointer == nullptr)
    throw Error(fmt::format("ulysses in-flight check: the {} buffer is not mapped host memory; expected host buffers", what));
  return a.hostPointer;
}

struct Slot {  // one flag a destination waits on, and the rows of its tile there
  int d, src, b, h, m_block;
  const uint64_t* flag;
  int64_t row_begin, row_end;  // local rows of d's shard
};

}  // namespace

std::string UlyssesAttention::check_flags_in_flight(const UlyssesRun& run, int* seen_while_running) {
  World& w = world();
  if (w.backend() != Backend::emulated || w.placement() != Placement::host)
    throw Error(fmt::format("ulysses in-flight check: this world is {}; expected emulated ranks with host buffers (the "
                            "CPU reads the flags and outputs while the kernel writes them)",
                            w.describe()));
  if (!is_fused(run.variant))
    throw Error(fmt::format("ulysses in-flight check: {} publishes no flags; expected a fused or coupled variant",
                            to_string(run.variant)));
  // 1. The reference: the run itself, checked against the local results.
  if (std::string bad = check_against_local(run); !bad.empty()) return bad;
  const UlyssesLayout& l = layout();
  const int P = l.shape().P, bm = block_m();
  const int64_t S = l.shape().S, c = l.chunk_rows(), H = l.shape().H, D = l.shape().D, B = l.shape().B;
  const int64_t Hl = l.heads_per_rank();
  std::vector<std::vector<uint16_t>> want(static_cast<size_t>(P));
  std::vector<const uint16_t*> out(static_cast<size_t>(P));
  std::vector<Slot> slots;
  const int stride = ulysses::ulysses_flag_stride(c, bm);
  for (int d = 0; d < P; ++d) {
    want[size_t(d)] = download_output(d);
    out[size_t(d)] = static_cast<const uint16_t*>(host_view(output_buffer().ptrs[size_t(d)], "output"));
    const auto* flags = static_cast<const uint64_t*>(host_view(flag_buffer().ptrs[size_t(d)], "flag"));
    const remote::RankRange mine = ulysses::ulysses_receiver_m_blocks(d, bm, S, c);
    for (int src = 0; src < P; ++src)
      for (int b = 0; b < int(B); ++b)
        for (int h = 0; h < int(Hl); ++h)
          for (int mb = mine.first; mb <= mine.last; ++mb) {
            const int64_t stream = ulysses::ulysses_stream_index(src, b, h, int(B), int(Hl));
            const int64_t begin = std::max<int64_t>(int64_t(mb) * bm, d * c) - d * c;
            const int64_t end = std::min<int64_t>(int64_t(mb + 1) * bm, d * c + l.seq_rows(d)) - d * c;
            slots.push_back({d, src, b, h, mb, flags + stream * stride + (mb - mine.first), begin, end});
          }
  }
  // The first row of a slot's tile that does not hold the reference, as text
  // ("" when all do). A row is compared whole (memcmp: the CPU checks a tile
  // in microseconds, so that it keeps up with flags arriving during the run),
  // and element by element only to name what differs.
  auto tile_problem = [&](const Slot& s) -> std::string {
    const int64_t S_d = l.seq_rows(s.d), hg = s.src * Hl + s.h;
    for (int64_t i = s.row_begin; i < s.row_end; ++i) {
      const size_t at = size_t(((s.b * S_d + i) * H + hg) * D);
      const uint16_t* got = out[size_t(s.d)] + at;
      const uint16_t* ref = want[size_t(s.d)].data() + at;
      if (std::memcmp(got, ref, size_t(D) * sizeof(uint16_t)) == 0) continue;
      for (int64_t col = 0; col < D; ++col) {
        const uint16_t g = std::atomic_ref<uint16_t>(const_cast<uint16_t&>(got[col])).load(std::memory_order_relaxed);
        if (g != ref[col])
          return fmt::format("rank {}: the flag of (source {}, b {}, head {}, m-block {}) was set, but row {} "
                             "(global {}), column {} held 0x{:04x}, not 0x{:04x}{}",
                             s.d, s.src, s.b, s.h, s.m_block, i, s.d * c + i, col, g, ref[col],
                             g == 0xFFFF ? " (the poison: the data came after the flag)" : "");
      }
      // The row differed at the memcmp and matches now: it was still arriving.
      return fmt::format("rank {}: the flag of (source {}, b {}, head {}, m-block {}) was set while row {} (global "
                         "{}) was still arriving (the data came after the flag)",
                         s.d, s.src, s.b, s.h, s.m_block, i, s.d * c + i);
    }
    return "";
  };

  // 2. The run again on poisoned outputs, the CPU polling its flags.
  poison_outputs();
  const uint64_t next = epoch() + 1;
  cudaEvent_t raw = nullptr;
  XSTAGE_CUDA(cudaEventCreateWithFlags(&raw, cudaEventDisableTiming));
  const std::unique_ptr<CUevent_st, decltype(&cudaEventDestroy)> event(raw, &cudaEventDestroy);
  cudaEvent_t done = event.get();
  w.fork();
  enqueue(run);
  w.join();
  XSTAGE_CUDA(cudaEventRecord(done, w.lead_stream()));
  std::vector<const uint64_t*> flags;
  for (const Slot& s : slots) flags.push_back(s.flag);
  const FlagWatch watch = watch_flags(
      flags, next, run.timeout_s, [&](size_t i) { return tile_problem(slots[i]); },
      [&] { return cudaEventQuery(done) == cudaErrorNotReady; });
  XSTAGE_CUDA(cudaEventSynchronize(done));
  w.barrier();
  check_receivers();
  if (seen_while_running) *seen_while_running = watch.seen_while_running;
  if (!watch.problem.empty()) return fmt::format("{} (in flight): {}", to_string(run.variant), watch.problem);
  if (!watch.unseen.empty()) {
    const Slot& s = slots[watch.unseen.front()];
    return fmt::format("{}: rank {}: the flag of (source {}, b {}, head {}, m-block {}) did not reach {} within {} s "
                       "(it holds {}; {} flags did not)",
                       to_string(run.variant), s.d, s.src, s.b, s.h, s.m_block, next, run.timeout_s, *s.flag,
                       watch.unseen.size());
  }
  return "";
}

}  // namespace xstage
