// Host side of the X-Stage probe (src/device/probe/ holds the kernels):
// destination buffers per transport, launch,
// per-burst statistics, and the destination check.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include <cuda_runtime.h>

#include "device/comm/start_barrier_flag.hpp"
#include "device/probe/probe_launch.hpp"
#include "runtime/comm/flag_timeout.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/core/units.hpp"
#include "xstage/probe/probe.hpp"

namespace xstage {

namespace {

template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  size_t n = 0;
  void resize(size_t count) {
    if (count <= n) return;
    if (ptr) XSTAGE_CUDA(cudaFree(ptr));
    XSTAGE_CUDA(cudaMalloc(&ptr, count * sizeof(T)));
    n = count;
  }
  ~DeviceArray() {
    if (ptr) cudaFree(ptr);
  }
  std::vector<T> fetch(size_t count) const {
    std::vector<T> h(count);
    XSTAGE_CUDA(cudaMemcpy(h.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

struct Prober::Impl {
  Transport transport;
  int device = 0;
  int dst_device = 0;       // where a local/peer destination lives
  size_t dst_bytes = 0;
  uint8_t* dst = nullptr;   // device-visible address of the destination
  void* host_dst = nullptr; // host transport: the pinned allocation
  uint64_t* flags = nullptr;
  void* host_flags = nullptr;
  double cycles_per_ns = 0;
  DeviceArray<uint32_t> gap_done, fence;
  DeviceArray<uint64_t> start_cycles, start, visible, calib;
  DeviceArray<float> sink;
  DeviceArray<unsigned long long> mismatches;
  DeviceArray<uint64_t> barrier;
  DeviceArray<remote::FlagTimeoutRecord> wait_record;
  cudaStream_t stream = nullptr;

  ~Impl() {
    cudaSetDevice(device);
    if (stream) cudaStreamDestroy(stream);
    if (host_dst) cudaFreeHost(host_dst);
    if (host_flags) cudaFreeHost(host_flags);
    if (transport != Transport::host) {
      cudaSetDevice(dst_device);
      if (dst) cudaFree(dst);
      if (flags) cudaFree(flags);
      cudaSetDevice(device);
    }
  }
};

Prober::Prober(Transport t, int device, size_t dst_bytes) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.transport = t;
  m.device = device;
  m.dst_bytes = dst_bytes;
  const int n = cuda_device_count();
  if (n == 0) throw Error("probe: no CUDA GPU is visible to this process; expected a machine with a GPU");
  if (device >= n) throw Error(fmt::format("probe: device {} does not exist ({} visible); expected a visible device", device, n));
  XSTAGE_CUDA(cudaSetDevice(device));
  constexpr size_t kFlagBytes = 4096;
  switch (t) {
    case Transport::local:
      m.dst_device = device;
      XSTAGE_CUDA(cudaMalloc(&m.dst, dst_bytes));
      XSTAGE_CUDA(cudaMalloc(&m.flags, kFlagBytes));
      break;
    case Transport::host:
      // Pinned host memory mapped into the device: every store is a PCIe posted write.
      XSTAGE_CUDA(cudaHostAlloc(&m.host_dst, dst_bytes, cudaHostAllocMapped | cudaHostAllocPortable));
      XSTAGE_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&m.dst), m.host_dst, 0));
      XSTAGE_CUDA(cudaHostAlloc(&m.host_flags, kFlagBytes, cudaHostAllocMapped | cudaHostAllocPortable));
      XSTAGE_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&m.flags), m.host_flags, 0));
      break;
    case Transport::peer: {
      if (n < device + 2)
        throw Error(fmt::format("probe: the peer transport needs a second GPU (device {}); this machine has {} GPU{}; expected "
                                "two GPUs from --device on",
                                device + 1, n, n == 1 ? "" : "s"));
      int can = 0;
      XSTAGE_CUDA(cudaDeviceCanAccessPeer(&can, device, device + 1));
      if (!can) throw Error(fmt::format("probe: device {} cannot access device {} (no peer path); expected GPUs with peer access", device,
                                    device + 1));
      m.dst_device = device + 1;
      XSTAGE_CUDA(cudaSetDevice(device + 1));
      XSTAGE_CUDA(cudaMalloc(&m.dst, dst_bytes));
      XSTAGE_CUDA(cudaMalloc(&m.flags, kFlagBytes));
      XSTAGE_CUDA(cudaSetDevice(device));
      const cudaError_t e = cudaDeviceEnablePeerAccess(device + 1, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled)
        (void)cudaGetLastError();
      else
        XSTAGE_CUDA(e);
      break;
    }
  }
  XSTAGE_CUDA(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  // SM clock against the global timer, over 20 ms.
  m.calib.resize(2);
  XSTAGE_CUDA(probe::launch_calibrate(20'000'000, m.calib.ptr, m.stream));
  XSTAGE_CUDA(cudaStreamSynchronize(m.stream));
  const auto c = m.calib.fetch(2);
  m.cycles_per_ns = double(c[1]) / double(c[0]);
}

Prober::~Prober() = default;

double Prober::cycles_per_ns() const { return impl_->cycles_per_ns; }
Transport Prober::transport() const { return impl_->transport; }

ProbeMeasurement Prober::run(const ProbePoint& pt) {
  Impl& m = *impl_;
  XSTAGE_CUDA(cudaSetDevice(m.device));
  if (pt.K < 1) throw Error(fmt::format("probe: K = {}; expected >= 1", pt.K));
  if (pt.warps < 1 || pt.warps > 32) throw Error(fmt::format("probe: warps = {}; expected 1..32", pt.warps));
  if (pt.bursts < 1 || pt.bursts > int(probe::kMaxBursts))
    throw Error(fmt::format("probe: bursts = {}; expected 1..{}", pt.bursts, probe::kMaxBursts));
  if (!(pt.gap_ns >= 0)) throw Error(fmt::format("probe: the gap is {} ns; expected 0 ns or more", pt.gap_ns));
  if (!(pt.stagger_ns >= 0) || !(pt.stagger_ns <= kMaxStaggerNs))
    throw Error(fmt::format("probe: stagger = {} ns; expected 0 .. {} ns", pt.stagger_ns, kMaxStaggerNs));
  const uint64_t chunk = static_cast<uint64_t>(pt.V_bytes / pt.K) / 16 * 16;
  if (chunk == 0)
    throw Error(fmt::format("probe: V = {} B is too small for K = {} producers; expected at least 16 B each", pt.V_bytes, pt.K));
  if (chunk > 0xFFFFFFFFull) throw Error(fmt::format("probe: a producer's share is {} B; expected at most 4 GiB", chunk));
  const uint64_t slot = chunk * pt.K;
  const uint64_t slots = m.dst_bytes / slot;
  if (slots == 0)
    throw Error(fmt::format("probe: V = {} B exceeds the destination buffer; expected at most {} B", pt.V_bytes, m.dst_bytes));
  const size_t nrec = size_t(pt.bursts) * pt.K;
  m.start_cycles.resize(nrec);
  m.gap_done.resize(nrec);
  m.fence.resize(nrec);
  m.start.resize(nrec);
  m.visible.resize(pt.bursts);
  m.calib.resize(size_t(pt.K) * 4);
  m.sink.resize(pt.K);
  m.mismatches.resize(1);
  m.barrier.resize(2);
  m.wait_record.resize(1);
  // The start barrier needs every producer resident at once.
  {
    int per_sm = 0;
    XSTAGE_CUDA(probe::max_resident_blocks(pt.store, pt.gap, 32 * pt.warps,
                                           sizeof(uint64_t) * 3 * pt.bursts, &per_sm));
    cudaDeviceProp prop{};
    XSTAGE_CUDA(cudaGetDeviceProperties(&prop, m.device));
    const int resident = per_sm * prop.multiProcessorCount;
    if (pt.K + 1 > resident)
      throw Error(fmt::format("probe: K = {} producers of {} warps cannot all be resident; expected at most {} here", pt.K,
                              pt.warps, resident - 1));
  }

  // Poison what this run will write, so that the check sees only this run's stores.
  const uint32_t slots_written = static_cast<uint32_t>(std::min<uint64_t>(slots, pt.bursts));
  XSTAGE_CUDA(cudaMemsetAsync(m.dst, 0xA5, slot * slots_written, m.stream));
  XSTAGE_CUDA(cudaMemsetAsync(m.flags, 0, sizeof(uint64_t) * pt.K, m.stream));
  XSTAGE_CUDA(cudaMemsetAsync(m.mismatches.ptr, 0, sizeof(unsigned long long), m.stream));
  XSTAGE_CUDA(cudaMemsetAsync(m.barrier.ptr, 0, 2 * sizeof(uint64_t), m.stream));
  XSTAGE_CUDA(cudaMemsetAsync(m.wait_record.ptr, 0, sizeof(remote::FlagTimeoutRecord), m.stream));

  probe::KernelParams kp{};
  kp.dst = m.dst;
  kp.slot_bytes = slot;
  kp.slots = static_cast<uint32_t>(std::min<uint64_t>(slots, 1u << 30));
  kp.chunk_bytes = static_cast<uint32_t>(chunk);
  kp.bursts = pt.bursts;
  kp.slots_warm = pt.warmup ? slots_written : 0;
  kp.gap_cycles = static_cast<uint64_t>(pt.gap_ns * m.cycles_per_ns);
  // The warm-up's fence does not wait for the far end of a PCIe path: let
  // what it wrote drain (at >= 40 GB/s on the host path, 1 TB/s elsewhere) twice over.
  const double warm_bytes = double(slot) * kp.slots_warm;
  const double settle_ns =
      pt.settle_ns >= 0 ? pt.settle_ns : 200e3 + 2.0 * warm_bytes / (m.transport == Transport::host ? 40.0 : 1000.0);
  kp.settle_ns = static_cast<uint64_t>(settle_ns);
  kp.stagger_ns = static_cast<uint64_t>(pt.stagger_ns);
  kp.K = pt.K;
  kp.completion = pt.completion;
  kp.flags = m.flags;
  kp.start_barrier = m.barrier.ptr;
  kp.timeout_ns = 10'000'000'000ull;
  kp.timeout_record = m.wait_record.ptr;
  kp.start_cycles = m.start_cycles.ptr;
  kp.gap_cycles_done = m.gap_done.ptr;
  kp.fence_cycles = m.fence.ptr;
  kp.start_ns = m.start.ptr;
  kp.visible_ns = m.visible.ptr;
  kp.calib = m.calib.ptr;
  kp.sink = m.sink.ptr;
  const int blocks = pt.K + (pt.completion == BurstCompletion::flag ? 1 : 0);
  XSTAGE_CUDA(probe::launch_bursts(kp, pt.store, pt.gap, blocks, 32 * pt.warps, m.stream));
  XSTAGE_CUDA(probe::launch_verify(reinterpret_cast<const uint32_t*>(m.dst), slot, slots_written, kp.slots, pt.bursts,
                                   kp.chunk_bytes, m.mismatches.ptr, m.stream));
  XSTAGE_CUDA(cudaStreamSynchronize(m.stream));
  if (const auto w = m.wait_record.fetch(1)[0]; w.set != 0)
    throw Error(fmt::format("probe: K = {}, V = {} B: {} {}; expected every producer to arrive and every burst's "
                            "flag to be released within {}",
                            pt.K, pt.V_bytes,
                            w.flag == kStartBarrierFlag
                                ? fmt::format("the producers' start barrier (rank {}, flag {}) timed out", w.rank, w.flag)
                                : fmt::format("the receiver waited on producer {}'s flag (rank {})", w.flag, w.rank),
                            timed_out_values(w), format_ns(double(kp.timeout_ns))));

  ProbeMeasurement r;
  r.point = pt;
  r.V_bytes = double(slot);
  r.checked_words = slot / 4 * slots_written;
  r.mismatches = m.mismatches.fetch(1)[0];
  const auto calib = m.calib.fetch(size_t(pt.K) * 4);
  std::vector<double> ratio;
  uint64_t first_start = ~0ull, last_end = 0;
  for (int k = 0; k < pt.K; ++k) {
    first_start = std::min(first_start, calib[4 * k]);
    last_end = std::max(last_end, calib[4 * k + 2]);
    const double dns = double(calib[4 * k + 2] - calib[4 * k]);
    if (dns > 0) ratio.push_back(double(calib[4 * k + 3] - calib[4 * k + 1]) / dns);
  }
  r.cycles_per_ns = ratio.empty() ? m.cycles_per_ns : median(ratio);
  r.run_ns = double(last_end - first_start);
  const auto gap_done = m.gap_done.fetch(nrec);
  const auto start_cycles = m.start_cycles.fetch(nrec);
  r.sustained_Bps = r.run_ns > 0 ? double(slot) * pt.bursts / (r.run_ns * 1e-9) : 0;
  r.issue_run_ns = 0;
  for (int k = 0; k < pt.K; ++k) {
    double busy = double(calib[4 * k + 3] - start_cycles[k]);  // burst 0 start to the end, this producer
    for (int b = 0; b < pt.bursts; ++b) busy -= double(gap_done[size_t(b) * pt.K + k]);
    r.issue_run_ns = std::max(r.issue_run_ns, busy / pt.bursts / r.cycles_per_ns);
  }
  const auto start = m.start.fetch(nrec);
  {
    const auto [lo, hi] = std::minmax_element(start.begin(), start.begin() + pt.K);  // burst 0 of every producer
    r.stagger_realised_ns = double(*hi - *lo);
  }
  // Issue span of burst b: start of b to start of b+1 (or the end of the run), minus the gap computed.
  auto span_cycles = [&](int b, int k) {
    const uint64_t next = b + 1 < pt.bursts ? start_cycles[size_t(b + 1) * pt.K + k] : calib[4 * k + 3];
    return double(next - start_cycles[size_t(b) * pt.K + k]) - double(gap_done[size_t(b) * pt.K + k]);
  };
  const auto fence = pt.completion == BurstCompletion::fence ? m.fence.fetch(nrec) : std::vector<uint32_t>();
  const auto vis = pt.completion == BurstCompletion::flag ? m.visible.fetch(pt.bursts) : std::vector<uint64_t>();
  for (int b = 0; b < pt.bursts; ++b) {
    double mx = 0, sum = 0, fmx = 0;
    uint64_t first = ~0ull;
    for (int k = 0; k < pt.K; ++k) {
      const double ns = span_cycles(b, k) / r.cycles_per_ns;
      mx = std::max(mx, ns);
      sum += ns;
      first = std::min(first, start[size_t(b) * pt.K + k]);
      if (!fence.empty()) fmx = std::max(fmx, fence[size_t(b) * pt.K + k] / r.cycles_per_ns);
    }
    r.issue_max_ns.push_back(mx);
    r.issue_mean_ns.push_back(sum / pt.K);
    if (!fence.empty()) r.fence_ns.push_back(fmx);
    if (!vis.empty()) r.complete_ns.push_back(double(vis[b] - first));
  }
  return r;
}

double Prober::copy_engine_Bps(size_t bytes, int reps) {
  Impl& m = *impl_;
  XSTAGE_CUDA(cudaSetDevice(m.device));
  bytes = std::min(bytes, m.dst_bytes);
  void* src = nullptr;
  XSTAGE_CUDA(cudaMalloc(&src, bytes));
  XSTAGE_CUDA(cudaMemsetAsync(src, 0x3C, bytes, m.stream));
  cudaEvent_t a, b;
  XSTAGE_CUDA(cudaEventCreate(&a));
  XSTAGE_CUDA(cudaEventCreate(&b));
  void* dst = m.transport == Transport::host ? m.host_dst : m.dst;
  std::vector<double> t;
  for (int i = 0; i < reps + 2; ++i) {
    XSTAGE_CUDA(cudaEventRecord(a, m.stream));
    if (m.transport == Transport::peer)
      XSTAGE_CUDA(cudaMemcpyPeerAsync(dst, m.dst_device, src, m.device, bytes, m.stream));
    else
      XSTAGE_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, m.stream));
    XSTAGE_CUDA(cudaEventRecord(b, m.stream));
    XSTAGE_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    XSTAGE_CUDA(cudaEventElapsedTime(&ms, a, b));
    if (i >= 2) t.push_back(ms * 1e-3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  XSTAGE_CUDA(cudaFree(src));
  return double(bytes) / median(t);
}

}  // namespace xstage
