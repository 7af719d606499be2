// The GPU half of `xstage visible` (src/device/visible/ holds the kernels):
// buffers per path, the ping-pong clock calibration, the CPU poller thread,
// the run, and the trace on GPU 0's clock.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <cuda_runtime.h>

#include "device/comm/wait_flag.hpp"
#include "device/probe/probe_launch.hpp"
#include "device/visible/visible_launch.hpp"
#include "harness/visible/visible.hpp"
#include "runtime/comm/flag_timeout.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"

namespace xstage {

namespace {

int64_t cpu_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Pinned host memory mapped into every device (portable): the GPU's stores to
// it are PCIe posted writes; the CPU reads it coherently.
struct HostMapped {
  void* host = nullptr;
  uint8_t* dev = nullptr;
  size_t bytes = 0;
  void allocate(size_t n) {
    if (n <= bytes) return;
    release();
    XSTAGE_CUDA(cudaHostAlloc(&host, n, cudaHostAllocMapped | cudaHostAllocPortable));
    bytes = n;
    XSTAGE_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev), host, 0));
  }
  void release() {
    if (host) cudaFreeHost(host);
    host = nullptr;
    dev = nullptr;
    bytes = 0;
  }
  ~HostMapped() { release(); }
};

// Device memory on a given GPU.
struct DeviceMem {
  int device = 0;
  void* ptr = nullptr;
  size_t bytes = 0;
  void allocate(int dev, size_t n) {
    if (n <= bytes && dev == device) return;
    release();
    device = dev;
    XSTAGE_CUDA(cudaSetDevice(dev));
    XSTAGE_CUDA(cudaMalloc(&ptr, n));
    bytes = n;
  }
  void release() {
    if (ptr) {
      cudaSetDevice(device);
      cudaFree(ptr);
    }
    ptr = nullptr;
    bytes = 0;
  }
  ~DeviceMem() { release(); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};

template <typename T>
std::vector<T> fetch(const DeviceMem& m, size_t count) {
  std::vector<T> h(count);
  XSTAGE_CUDA(cudaSetDevice(m.device));
  XSTAGE_CUDA(cudaMemcpy(h.data(), m.ptr, count * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

std::string status_text(const std::vector<uint64_t>& s) {
  return fmt::format("round/burst {}, producer {}: expected {:#x}, saw {:#x}, after {:.3f} ms", s[1], s[2], s[4], s[3],
                     s[5] * 1e-6);
}

// What the CPU poller thread saw.
struct HostPoll {
  std::vector<int64_t> seen;  // CPU ns (relative to the runner's base), -1: not seen
  uint64_t seen_count = 0;
  int64_t longest_pass_ns = 0;
  uint64_t data_mismatches = 0;
  std::string failure;  // empty: every marker seen
};

}  // namespace

struct VisibleRunner::Impl {
  VisiblePoint setup;
  int obs_device = 0;  // where the markers and the destination live
  int64_t cpu_base = 0;
  uint64_t gpu_base[2] = {0, 0};  // first %globaltimer read of each GPU (0: none yet)
  double timer_res[2] = {0, 0};
  double cpu_res = 0;
  double cycles_per_ns = 0;
  int resident = 0;  // producer blocks resident at once on the producers' GPU
  cudaStream_t stream = nullptr, obs_stream = nullptr;
  HostMapped ping, host_dst, host_markers;
  DeviceMem dev_dst, dev_markers, barrier, log, status, seen, counters, scratch, obs_status, wait_record;

  ~Impl() {
    cudaSetDevice(setup.device);
    if (stream) cudaStreamDestroy(stream);
    if (obs_stream) {
      cudaSetDevice(obs_device);
      cudaStreamDestroy(obs_stream);
    }
  }

  double measure_timer(int dev, cudaStream_t s) {
    scratch.allocate(dev, 64);
    XSTAGE_CUDA(cudaSetDevice(dev));
    XSTAGE_CUDA(visible::launch_timer_resolution(scratch.as<uint64_t>(), 5'000'000, s));
    XSTAGE_CUDA(cudaStreamSynchronize(s));
    const auto out = fetch<uint64_t>(scratch, 3);
    if (out[1] == 0) throw Error(fmt::format("visible: GPU {}'s %globaltimer did not change in 5 ms; expected a running global timer", dev));
    return double(out[0]);
  }

  // CPU <-> GPU `dev` ping-pong through mapped memory; offset: gpu = cpu + offset (relative to the bases).
  ClockOffset calibrate_cpu(int dev, cudaStream_t s, const VisiblePoint& p) {
    const int slot = dev == setup.device ? 0 : 1;
    auto* request = static_cast<uint64_t*>(ping.host);
    uint64_t* response = request + 8;  // its own line
    std::atomic_ref<uint64_t>(*request).store(0, std::memory_order_release);
    std::atomic_ref<uint64_t>(response[0]).store(0, std::memory_order_release);
    std::atomic_ref<uint64_t>(response[1]).store(0, std::memory_order_release);
    XSTAGE_CUDA(cudaSetDevice(dev));
    obs_status.allocate(dev, sizeof(uint64_t) * visible::kStatusWords);
    XSTAGE_CUDA(cudaMemsetAsync(obs_status.ptr, 0, sizeof(uint64_t) * visible::kStatusWords, s));
    visible::PingParams pp{};
    pp.request = reinterpret_cast<const uint64_t*>(ping.dev);
    pp.response = reinterpret_cast<uint64_t*>(ping.dev) + 8;
    pp.rounds = p.calib_rounds;
    pp.timeout_ns = static_cast<uint64_t>(p.timeout_ns);
    pp.status = obs_status.as<uint64_t>();
    XSTAGE_CUDA(visible::launch_ping_responder(pp, s));
    std::vector<PingRound> rounds;
    rounds.reserve(p.calib_rounds);
    std::string failure;
    for (int n = 1; n <= p.calib_rounds && failure.empty(); ++n) {
      const int64_t t_send = cpu_now_ns();
      std::atomic_ref<uint64_t>(*request).store(uint64_t(n), std::memory_order_release);
      uint64_t got = 0;
      int64_t t_recv = 0;
      while ((got = std::atomic_ref<uint64_t>(response[1]).load(std::memory_order_acquire)) != uint64_t(n)) {
        t_recv = cpu_now_ns();
        if (t_recv - t_send > int64_t(p.timeout_ns)) {
          failure = fmt::format("clock calibration: GPU {} did not answer round {} of {} within {:.0f} ms "
                                "(flag: the response's round number; expected {}, saw {})",
                                dev, n, p.calib_rounds, p.timeout_ns * 1e-6, n, got);
          break;
        }
      }
      if (!failure.empty()) break;
      t_recv = cpu_now_ns();
      const uint64_t gt = std::atomic_ref<uint64_t>(response[0]).load(std::memory_order_acquire);
      if (gpu_base[slot] == 0) gpu_base[slot] = gt;
      rounds.push_back({double(t_send - cpu_base), double(t_recv - cpu_base), double(int64_t(gt - gpu_base[slot]))});
    }
    if (!failure.empty()) std::atomic_ref<uint64_t>(*request).store(visible::kQuitRequest, std::memory_order_release);
    XSTAGE_CUDA(cudaStreamSynchronize(s));  // the responder's own waits are bounded by the same timeout
    if (!failure.empty()) throw Error(failure);
    const auto st = fetch<uint64_t>(obs_status, visible::kStatusWords);
    if (st[0] != visible::kOk)
      throw Error(fmt::format("clock calibration: GPU {}'s responder stopped ({}): {}; expected it to answer every round", dev,
                              st[0] == visible::kTimeout ? "timeout" : "quit", status_text(st)));
    return estimate_offset(rounds, timer_res[slot]);
  }

  HostPoll poll_host(const VisiblePoint& p, uint64_t chunk, uint64_t slot_bytes, uint32_t slots,
                     const std::atomic<bool>& abort) const {
    const int K = p.K;
    const uint32_t B = p.bursts;
    HostPoll r;
    r.seen.assign(size_t(K) * B, -1);
    std::vector<uint32_t> next(K, 0);
    const auto* markers = static_cast<uint64_t*>(host_markers.host);
    const auto* dst = static_cast<const uint8_t*>(host_dst.host);
    const uint32_t last_word = static_cast<uint32_t>(chunk / 4 - 1);
    const int64_t t_start = cpu_now_ns();
    uint64_t left = uint64_t(K) * B;
    while (left > 0) {
      const int64_t pass_start = cpu_now_ns();
      for (int k = 0; k < K; ++k) {
        uint32_t b = next[k];
        while (b < B) {
          uint64_t& m = const_cast<uint64_t&>(markers[(uint64_t(b) * K + k) * visible::kMarkerStrideWords]);
          const uint64_t v = std::atomic_ref<uint64_t>(m).load(std::memory_order_acquire);
          if (v == 0) break;
          const int64_t t = cpu_now_ns();
          if (v != visible::marker_value(b)) {
            r.failure = fmt::format("CPU poller thread: marker of burst {} from CTA {} (flag {}) holds {:#x}; "
                                    "expected {:#x}",
                                    b, k, uint64_t(b) * K + k, v, visible::marker_value(b));
            return r;
          }
          r.seen[size_t(b) * K + k] = t - cpu_base;
          // x86 keeps loads in order: this read sees the chunk as of the marker or later.
          uint32_t& word = const_cast<uint32_t&>(*reinterpret_cast<const uint32_t*>(
              dst + (b % slots) * slot_bytes + uint64_t(k) * chunk + 4ull * last_word));
          const uint32_t got = std::atomic_ref<uint32_t>(word).load(std::memory_order_acquire);
          bool ok = false;
          for (uint32_t later = b; later < B && !ok; later += slots) ok = got == visible::data_word(later, last_word);
          if (!ok) ++r.data_mismatches;
          ++b;
          --left;
          ++r.seen_count;
        }
        next[k] = b;
      }
      const int64_t now = cpu_now_ns();
      r.longest_pass_ns = std::max(r.longest_pass_ns, now - pass_start);
      if (left > 0 && (now - t_start > int64_t(p.timeout_ns) || abort.load())) {
        for (int k = 0; k < K; ++k) {
          if (next[k] >= B) continue;
          const uint32_t b = next[k];
          uint64_t& m = const_cast<uint64_t&>(markers[(uint64_t(b) * K + k) * visible::kMarkerStrideWords]);
          r.failure = fmt::format(
              "CPU poller thread {} after {:.0f} ms: marker of burst {} from CTA {} (flag {}) expected {:#x}, saw "
              "{:#x}; {} of {} markers seen",
              abort.load() ? "stopped (the kernel failed)" : "timed out", (now - t_start) * 1e-6, b, k,
              uint64_t(b) * K + k, visible::marker_value(b), std::atomic_ref<uint64_t>(m).load(), r.seen_count,
              uint64_t(K) * B);
          break;
        }
        return r;
      }
    }
    return r;
  }
};

VisibleRunner::VisibleRunner(const VisiblePoint& setup) : impl_(std::make_unique<Impl>()) {
  validate(setup);
  Impl& m = *impl_;
  m.setup = setup;
  const int n = cuda_device_count();
  if (n == 0) throw Error("visible: no CUDA GPU is visible to this process; expected a machine with a GPU");
  if (setup.device >= n) throw Error(fmt::format("visible: device {} does not exist ({} visible); expected a visible device", setup.device, n));
  m.obs_device = setup.device;
  if (setup.path == VisiblePath::peer) {
    if (n < setup.device + 2)
      throw Error(fmt::format("visible: the peer path needs a second GPU (device {}); this machine has {} GPU{}; expected two GPUs from --device on",
                              setup.device + 1, n, n == 1 ? "" : "s"));
    int can = 0;
    XSTAGE_CUDA(cudaDeviceCanAccessPeer(&can, setup.device, setup.device + 1));
    if (!can)
      throw Error(fmt::format("visible: device {} cannot access device {} (no peer path); expected GPUs with peer access", setup.device,
                              setup.device + 1));
    m.obs_device = setup.device + 1;
    XSTAGE_CUDA(cudaSetDevice(setup.device));
    const cudaError_t e = cudaDeviceEnablePeerAccess(setup.device + 1, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled)
      (void)cudaGetLastError();
    else
      XSTAGE_CUDA(e);
  }
  m.cpu_base = cpu_now_ns();
  XSTAGE_CUDA(cudaSetDevice(setup.device));
  XSTAGE_CUDA(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  XSTAGE_CUDA(cudaSetDevice(m.obs_device));
  XSTAGE_CUDA(cudaStreamCreateWithFlags(&m.obs_stream, cudaStreamNonBlocking));
  // On the local path the poller spins while the producers and the verify
  // kernel launch behind it on the same GPU. A first launch that loads a
  // kernel, or sets up the printf buffer (no kernel here prints; one that
  // did would), would wait for the poller to time out.
  auto prepare = [](int dev, cudaStream_t s) {
    XSTAGE_CUDA(cudaSetDevice(dev));
    XSTAGE_CUDA(visible::preload_kernels());
    comm::set_up_printf_buffer(s);
  };
  prepare(setup.device, m.stream);
  if (m.obs_device != setup.device) prepare(m.obs_device, m.obs_stream);
  m.ping.allocate(4096);
  const size_t dst = static_cast<size_t>(setup.dst_bytes);
  if (setup.path == VisiblePath::host)
    m.host_dst.allocate(dst);
  else
    m.dev_dst.allocate(m.obs_device, dst);

  m.timer_res[0] = m.measure_timer(setup.device, m.stream);
  if (setup.path == VisiblePath::peer) m.timer_res[1] = m.measure_timer(m.obs_device, m.obs_stream);
  // The CPU clock's step: the smallest non-zero difference of two reads.
  int64_t step = std::numeric_limits<int64_t>::max();
  for (int i = 0; i < 2000; ++i) {
    const int64_t a = cpu_now_ns(), b = cpu_now_ns();
    if (b > a) step = std::min(step, b - a);
  }
  m.cpu_res = step == std::numeric_limits<int64_t>::max() ? 1000.0 : double(step);

  // SM clock against the global timer (the gap is counted in SM cycles, as the probe's).
  m.scratch.allocate(setup.device, 64);
  XSTAGE_CUDA(cudaSetDevice(setup.device));
  XSTAGE_CUDA(probe::launch_calibrate(5'000'000, m.scratch.as<uint64_t>(), m.stream));
  XSTAGE_CUDA(cudaStreamSynchronize(m.stream));
  const auto c = fetch<uint64_t>(m.scratch, 2);
  if (c[0] == 0) throw Error("visible: the SM clock calibration measured no time; expected a running SM clock");
  m.cycles_per_ns = double(c[1]) / double(c[0]);
  cudaDeviceProp prop{};
  XSTAGE_CUDA(cudaGetDeviceProperties(&prop, setup.device));
  m.resident = prop.multiProcessorCount;  // times blocks per SM, per run (depends on the bursts)
}

VisibleRunner::~VisibleRunner() = default;

VisibleTrace VisibleRunner::run(const VisiblePoint& p) {
  validate(p);
  Impl& m = *impl_;
  if (p.path != m.setup.path || p.device != m.setup.device)
    throw Error("visible: a runner asked for another path or device; expected the path and device it was made for");
  const int K = p.K;
  const uint32_t B = static_cast<uint32_t>(p.bursts);
  const uint64_t chunk = visible_chunk_bytes(p);
  const uint64_t slot = chunk * K;
  const size_t dst_bytes = m.setup.path == VisiblePath::host ? m.host_dst.bytes : m.dev_dst.bytes;
  if (slot > dst_bytes)
    throw Error(fmt::format("visible: a burst of {} B exceeds the destination buffer; expected at most {} B", slot, dst_bytes));
  const uint32_t slots = static_cast<uint32_t>(std::min<uint64_t>(dst_bytes / slot, B));
  const int threads = 32 * p.warps;
  {
    XSTAGE_CUDA(cudaSetDevice(p.device));
    int per_sm = 0;
    XSTAGE_CUDA(visible::producer_blocks_per_sm(threads, B, &per_sm));
    const int need = K + (p.path == VisiblePath::local ? 1 : 0);  // the local poller shares the GPU
    if (need > per_sm * m.resident)
      throw Error(fmt::format("visible: K = {} producers of {} warps cannot all be resident{}; expected at most {} here", K,
                              p.warps, p.path == VisiblePath::local ? " beside the poller" : "",
                              per_sm * m.resident - (need - K)));
  }
  const size_t markers_bytes = size_t(K) * B * visible::kMarkerStrideWords * sizeof(uint64_t);
  const size_t records = size_t(K) * B;

  // Buffers of this run, zeroed or poisoned.
  uint8_t* dst = nullptr;
  uint64_t* markers = nullptr;
  if (p.path == VisiblePath::host) {
    m.host_markers.allocate(markers_bytes);
    std::memset(m.host_markers.host, 0, markers_bytes);
    dst = m.host_dst.dev;
    markers = reinterpret_cast<uint64_t*>(m.host_markers.dev);
  } else {
    m.dev_markers.allocate(m.obs_device, markers_bytes);
    m.seen.allocate(m.obs_device, records * sizeof(uint64_t));
    m.counters.allocate(m.obs_device, 2 * sizeof(unsigned long long) + visible::kStatusWords * sizeof(uint64_t));
    XSTAGE_CUDA(cudaSetDevice(m.obs_device));
    XSTAGE_CUDA(cudaMemsetAsync(m.dev_markers.ptr, 0, markers_bytes, m.obs_stream));
    XSTAGE_CUDA(cudaMemsetAsync(m.seen.ptr, 0, records * sizeof(uint64_t), m.obs_stream));
    XSTAGE_CUDA(cudaMemsetAsync(m.counters.ptr, 0, m.counters.bytes, m.obs_stream));
    XSTAGE_CUDA(cudaStreamSynchronize(m.obs_stream));
    dst = m.dev_dst.as<uint8_t>();
    markers = m.dev_markers.as<uint64_t>();
  }
  m.barrier.allocate(p.device, 2 * sizeof(uint64_t) + sizeof(unsigned long long));  // start barrier, verify count
  m.log.allocate(p.device, records * 3 * sizeof(uint64_t));
  m.wait_record.allocate(p.device, sizeof(remote::FlagTimeoutRecord));
  XSTAGE_CUDA(cudaSetDevice(p.device));
  XSTAGE_CUDA(cudaMemsetAsync(dst, 0xA5, slot * slots, m.stream));
  XSTAGE_CUDA(cudaMemsetAsync(m.barrier.ptr, 0, m.barrier.bytes, m.stream));
  XSTAGE_CUDA(cudaMemsetAsync(m.wait_record.ptr, 0, sizeof(remote::FlagTimeoutRecord), m.stream));
  XSTAGE_CUDA(cudaStreamSynchronize(m.stream));

  visible::ProducerParams kp{};
  kp.dst = dst;
  kp.slot_bytes = slot;
  kp.slots = slots;
  kp.chunk_bytes = static_cast<uint32_t>(chunk);
  kp.bursts = B;
  kp.K = K;
  kp.gap_cycles = static_cast<uint64_t>(p.gap_ns * m.cycles_per_ns);
  // The warm-up's fence does not wait for the far end of a PCIe path: let what
  // it wrote drain (at >= 40 GB/s on the host path, 1 TB/s elsewhere) twice over.
  const double warm_bytes = double(slot) * slots;
  const double settle_ns = 200e3 + 2.0 * warm_bytes / (p.path == VisiblePath::host ? 40.0 : 1000.0);
  kp.settle_ns = static_cast<uint64_t>(settle_ns);
  kp.markers = markers;
  kp.fenced_markers = p.fenced_markers ? 1u : 0u;
  kp.start_barrier = m.barrier.as<uint64_t>();
  kp.timeout_ns = static_cast<uint64_t>(p.timeout_ns);
  kp.timeout_record = m.wait_record.as<remote::FlagTimeoutRecord>();
  kp.log = m.log.as<uint64_t>();
  // After the producers' stream has been synchronised: their start barrier's wait, if it timed out.
  auto check_start_barrier = [&] {
    XSTAGE_CUDA(cudaSetDevice(p.device));
    const auto w = fetch_timeout_record(kp.timeout_record);
    if (w.set != 0)
      throw Error(fmt::format("visible: the {} producers' start barrier timed out (rank {}, flag {}) {}; expected "
                              "every producer resident and arrived within {:.0f} ms",
                              K, w.rank, w.flag, timed_out_values(w), p.timeout_ns * 1e-6));
  };
  auto* verify_count = reinterpret_cast<unsigned long long*>(m.barrier.as<uint64_t>() + 2);

  // Calibrate before.
  ClockOffset before0{}, before1{};
  if (p.path != VisiblePath::local) before0 = m.calibrate_cpu(p.device, m.stream, p);
  if (p.path == VisiblePath::peer) before1 = m.calibrate_cpu(m.obs_device, m.obs_stream, p);

  VisibleTrace tr;
  tr.point = p;
  tr.chunk_bytes = chunk;
  tr.V_bytes = double(slot);
  tr.timer_resolution_ns = m.timer_res[0];
  HostPoll hp;
  if (p.path == VisiblePath::host) {
    tr.observer = "CPU poller thread";
    std::atomic<bool> abort{false};
    std::thread poller([&] { hp = m.poll_host(p, chunk, slot, slots, abort); });
    try {
      XSTAGE_CUDA(visible::launch_producer(kp, threads, m.stream));
      XSTAGE_CUDA(visible::launch_verify(kp, verify_count, m.stream));
      XSTAGE_CUDA(cudaStreamSynchronize(m.stream));
      check_start_barrier();
    } catch (...) {
      abort = true;
      poller.join();
      throw;
    }
    poller.join();
    if (!hp.failure.empty()) throw Error("visible: " + hp.failure + "; expected the host poller to see every burst");
    tr.observer_resolution_ns = m.cpu_res;
    tr.poll_interval_ns = double(hp.longest_pass_ns);
    tr.markers_seen = hp.seen_count;
    tr.data_mismatches = hp.data_mismatches;
  } else {
    tr.observer = p.path == VisiblePath::peer ? fmt::format("GPU {} poller kernel", m.obs_device)
                                              : fmt::format("GPU {} poller kernel (second stream)", m.obs_device);
    visible::PollerParams pp{};
    pp.markers = markers;
    pp.dst = dst;
    pp.slot_bytes = slot;
    pp.slots = slots;
    pp.chunk_bytes = static_cast<uint32_t>(chunk);
    pp.bursts = B;
    pp.K = K;
    pp.timeout_ns = static_cast<uint64_t>(p.timeout_ns);
    pp.seen_ns = m.seen.as<uint64_t>();
    auto* counters = m.counters.as<unsigned long long>();
    pp.data_mismatches = counters;
    pp.max_poll_ns = counters + 1;
    pp.status = reinterpret_cast<uint64_t*>(counters + 2);
    const int poll_threads = std::min<int>(visible::kMaxPollers, (K + 31) / 32 * 32);
    XSTAGE_CUDA(cudaSetDevice(m.obs_device));
    XSTAGE_CUDA(visible::launch_poller(pp, poll_threads, m.obs_stream));
    XSTAGE_CUDA(cudaSetDevice(p.device));
    XSTAGE_CUDA(visible::launch_producer(kp, threads, m.stream));
    XSTAGE_CUDA(visible::launch_verify(kp, verify_count, m.stream));
    XSTAGE_CUDA(cudaStreamSynchronize(m.stream));
    XSTAGE_CUDA(cudaSetDevice(m.obs_device));
    XSTAGE_CUDA(cudaStreamSynchronize(m.obs_stream));  // bounded by the poller's timeout
    check_start_barrier();
    XSTAGE_CUDA(cudaSetDevice(m.obs_device));
    const auto c = fetch<unsigned long long>(m.counters, 2);
    const auto st = fetch<uint64_t>(m.counters, 2 + visible::kStatusWords);
    const std::vector<uint64_t> status(st.begin() + 2, st.end());
    if (status[0] != visible::kOk)
      throw Error(fmt::format("visible: {} {}: marker of burst {} from CTA {} (flag {}) expected {:#x}, saw {:#x} "
                              "after {:.0f} ms",
                              tr.observer, status[0] == visible::kTimeout ? "timed out" : "saw a wrong value",
                              status[1], status[2], status[1] * K + status[2], status[4], status[3],
                              status[5] * 1e-6));
    tr.data_mismatches = c[0];
    tr.poll_interval_ns = double(c[1]);
    tr.observer_resolution_ns = p.path == VisiblePath::peer ? m.timer_res[1] : m.timer_res[0];
    tr.markers_seen = records;
  }

  // Calibrate after, then put every time on GPU 0's clock.
  if (p.path == VisiblePath::host) {
    tr.clock.before = before0;
    tr.clock.after = m.calibrate_cpu(p.device, m.stream, p);
  } else if (p.path == VisiblePath::peer) {
    const ClockOffset after0 = m.calibrate_cpu(p.device, m.stream, p);
    const ClockOffset after1 = m.calibrate_cpu(m.obs_device, m.obs_stream, p);
    // gpu0 = cpu + off0 and gpu1 = cpu + off1, so gpu0 = gpu1 + (off0 - off1), the errors add.
    auto compose = [](const ClockOffset& o0, const ClockOffset& o1) {
      ClockOffset c;
      c.offset_ns = o0.offset_ns - o1.offset_ns;
      c.error_ns = o0.error_ns + o1.error_ns;
      c.rtt_ns = std::max(o0.rtt_ns, o1.rtt_ns);
      c.at_ns = o1.at_ns + o1.offset_ns;  // on GPU 1's clock, the observer's
      c.rounds = std::min(o0.rounds, o1.rounds);
      return c;
    };
    tr.clock.before = compose(before0, before1);
    tr.clock.after = compose(after0, after1);
  }

  XSTAGE_CUDA(cudaSetDevice(p.device));
  const auto verify = fetch<unsigned long long>(m.barrier, 3);
  tr.destination_mismatches = verify[2];
  tr.checked_words = slot / 4 * slots;
  const auto log = fetch<uint64_t>(m.log, records * 3);
  const uint64_t g0 = m.gpu_base[0] != 0 ? m.gpu_base[0] : log[0];
  auto gpu0 = [&](uint64_t t) { return double(int64_t(t - g0)); };
  double first = std::numeric_limits<double>::infinity();
  tr.start_ns.resize(records);
  tr.issued_ns.resize(records);
  tr.fenced_ns.resize(records);
  tr.seen_ns.assign(records, std::numeric_limits<double>::quiet_NaN());
  for (size_t i = 0; i < records; ++i) {
    tr.start_ns[i] = gpu0(log[3 * i]);
    tr.issued_ns[i] = gpu0(log[3 * i + 1]);
    tr.fenced_ns[i] = gpu0(log[3 * i + 2]);
    first = std::min(first, tr.start_ns[i]);
  }
  if (p.path == VisiblePath::host) {
    for (size_t i = 0; i < records; ++i)
      if (hp.seen[i] >= 0) tr.seen_ns[i] = double(hp.seen[i]) + tr.clock.at(double(hp.seen[i]));
  } else {
    const auto seen = fetch<uint64_t>(m.seen, records);
    const int slot_obs = p.path == VisiblePath::peer ? 1 : 0;
    const uint64_t base = m.gpu_base[slot_obs] != 0 ? m.gpu_base[slot_obs] : g0;
    for (size_t i = 0; i < records; ++i) {
      if (seen[i] == 0) continue;
      const double t = double(int64_t(seen[i] - base));
      tr.seen_ns[i] = t + tr.clock.at(t);
    }
  }
  for (size_t i = 0; i < records; ++i) {
    tr.start_ns[i] -= first;
    tr.issued_ns[i] -= first;
    tr.fenced_ns[i] -= first;
    tr.seen_ns[i] -= first;
  }
  return tr;
}

}  // namespace xstage
