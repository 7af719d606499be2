// The GPU half of `xstage duplex` (src/device/probe/duplex.cu): buffers on
// the path, three kinds of launch (reads alone, stores alone, both), each
// repeated and its median kept.
#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include <cuda_runtime.h>

#include "device/probe/duplex_launch.hpp"
#include "device/probe/probe_launch.hpp"
#include "runtime/core/device_buffer.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/probe/duplex.hpp"

namespace xstage {

static_assert(kDuplexWarpsPerBlock == probe::kDuplexWarps, "the public warp count is the kernel's");

const char* to_string(DuplexPath p) {
  switch (p) {
    case DuplexPath::host: return "host";
    case DuplexPath::local: return "local";
    case DuplexPath::peer: return "peer";
  }
  return "?";
}

DuplexPath parse_duplex_path(const std::string& s) {
  if (s == "host") return DuplexPath::host;
  if (s == "local") return DuplexPath::local;
  if (s == "peer") return DuplexPath::peer;
  throw Error(fmt::format("--path: '{}'; expected host, local or peer", s));
}

void validate(const DuplexConfig& c) {
  if (c.device < 0) throw Error(fmt::format("--device: {}; expected >= 0", c.device));
  if (c.bytes < (1u << 20) || c.bytes % 16 != 0 || c.bytes > (64ull << 30))
    throw Error(fmt::format("--bytes: {}; expected a multiple of 16 between 1 MiB and 64 GiB", c.bytes));
  if (c.blocks_per_sm < 1 || c.blocks_per_sm > 8)
    throw Error(fmt::format("--blocks-per-sm: {}; expected 1 .. 8", c.blocks_per_sm));
  if (c.read_warps < 1 || c.read_warps > kDuplexWarpsPerBlock - 1)
    throw Error(fmt::format("--read-warps: {}; expected 1 .. {} (the other warps of the block store)", c.read_warps,
                            kDuplexWarpsPerBlock - 1));
  if (c.reps < 1 || c.reps > 1000) throw Error(fmt::format("--reps: {}; expected 1 .. 1000", c.reps));
  if (c.loads_in_flight != 4 && c.loads_in_flight != 8)
    throw Error(fmt::format("--loads-in-flight: {}; expected 4 or 8", c.loads_in_flight));
}

namespace {

// A far buffer of the path: pinned host memory mapped into the GPU, the GPU's
// own memory, or the next GPU's memory through peer access. A failure part
// way frees what was made and leaves `device` current.
struct FarBuffer {
  void* host = nullptr;
  void* dev = nullptr;
  int owner = -1;  // the GPU that holds `dev` (not host memory)
  FarBuffer(DuplexPath path, int device, uint64_t bytes) {
    try {
      make(path, device, bytes);
    } catch (...) {
      release();
      cudaSetDevice(device);
      throw;
    }
  }
  ~FarBuffer() { release(); }
  FarBuffer(const FarBuffer&) = delete;
  FarBuffer& operator=(const FarBuffer&) = delete;

 private:
  void make(DuplexPath path, int device, uint64_t bytes) {
    if (path == DuplexPath::host) {
      XSTAGE_CUDA(cudaHostAlloc(&host, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
      XSTAGE_CUDA(cudaHostGetDevicePointer(&dev, host, 0));
      std::fill_n(static_cast<char*>(host), bytes, char(1));
      return;
    }
    const int gpu = path == DuplexPath::peer ? device + 1 : device;
    XSTAGE_CUDA(cudaSetDevice(gpu));
    XSTAGE_CUDA(cudaMalloc(&dev, bytes));
    owner = gpu;
    XSTAGE_CUDA(cudaMemset(dev, 1, bytes));
    XSTAGE_CUDA(cudaDeviceSynchronize());
    XSTAGE_CUDA(cudaSetDevice(device));
  }
  void release() {
    if (host) cudaFreeHost(host);
    if (owner >= 0) {
      int current = 0;
      cudaGetDevice(&current);
      cudaSetDevice(owner);
      cudaFree(dev);
      cudaSetDevice(current);
    }
    host = dev = nullptr;
    owner = -1;
  }
};

struct Spans {
  double read_ns = 0, store_ns = 0, overlap_ns = 0;
};

Spans run_once(const probe::DuplexParams& p, int blocks, int loads_in_flight, unsigned long long* span_dev) {
  const unsigned long long init[4] = {~0ull, 0, ~0ull, 0};
  XSTAGE_CUDA(cudaMemcpy(span_dev, init, sizeof init, cudaMemcpyHostToDevice));
  XSTAGE_CUDA(probe::launch_duplex(p, blocks, loads_in_flight, nullptr));
  XSTAGE_CUDA(cudaDeviceSynchronize());
  unsigned long long s[4];
  XSTAGE_CUDA(cudaMemcpy(s, span_dev, sizeof s, cudaMemcpyDeviceToHost));
  Spans out;
  if (p.read_bytes > 0) out.read_ns = s[1] > s[0] ? double(s[1] - s[0]) : 0.0;
  if (p.store_bytes > 0) out.store_ns = s[3] > s[2] ? double(s[3] - s[2]) : 0.0;
  // %globaltimer ticks coarsely (~32 ns on Hopper, 1 us elsewhere): a span it
  // cannot resolve gives no rate.
  for (double ns : {p.read_bytes > 0 ? out.read_ns : 1e9, p.store_bytes > 0 ? out.store_ns : 1e9})
    if (ns < 5'000)
      throw Error(fmt::format("duplex: a run took {:.0f} ns, too short for %globaltimer to time; expected at least 5000 ns "
                              "(give more --bytes)",
                              ns));
  if (p.read_bytes > 0 && p.store_bytes > 0)
    out.overlap_ns = std::max(0.0, double(std::min(s[1], s[3])) - double(std::max(s[0], s[2])));
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

DuplexRates measure_duplex(const DuplexConfig& c) {
  validate(c);
  int count = 0;
  XSTAGE_CUDA(cudaGetDeviceCount(&count));
  const int need = c.path == DuplexPath::peer ? c.device + 2 : c.device + 1;
  if (count < need)
    throw Error(fmt::format("duplex {} path on device {}: {} GPU(s) found; expected {}", to_string(c.path), c.device,
                            count, need));
  XSTAGE_CUDA(cudaSetDevice(c.device));
  if (c.path == DuplexPath::peer) {
    int can = 0;
    XSTAGE_CUDA(cudaDeviceCanAccessPeer(&can, c.device, c.device + 1));
    if (!can) throw Error(fmt::format("duplex peer path: device {} cannot access device {}; expected GPUs with peer access", c.device,
                                      c.device + 1));
    const cudaError_t e = cudaDeviceEnablePeerAccess(c.device + 1, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled)
      cudaGetLastError();
    else
      XSTAGE_CUDA(e);
  }
  cudaDeviceProp prop{};
  XSTAGE_CUDA(cudaGetDeviceProperties(&prop, c.device));
  FarBuffer src(c.path, c.device, c.bytes), dst(c.path, c.device, c.bytes);
  DeviceBuffer<unsigned long long> span(4), sink(1);
  DeviceBuffer<unsigned long long> clock(2);
  probe::DuplexParams p;
  p.read_src = src.dev;
  p.store_dst = dst.dev;
  p.read_warps = c.read_warps;
  p.span = span.ptr;
  p.sink = sink.ptr;
  const int blocks = prop.multiProcessorCount * c.blocks_per_sm;

  DuplexRates out;
  out.blocks = blocks;
  std::vector<double> ra, sa, rb, sb, ov;
  uint32_t salt = 0;
  for (int rep = 0; rep < c.reps + 1; ++rep) {  // the first of each kind warms up
    probe::DuplexParams r = p, s = p, b = p;
    r.read_bytes = c.bytes;
    s.store_bytes = c.bytes;
    b.read_bytes = b.store_bytes = c.bytes;
    s.salt = ++salt;
    b.salt = ++salt;
    const int f = c.loads_in_flight;
    const Spans x = run_once(r, blocks, f, span.ptr), y = run_once(s, blocks, f, span.ptr),
                z = run_once(b, blocks, f, span.ptr);
    if (rep == 0) continue;
    ra.push_back(double(c.bytes) / x.read_ns * 1e9);
    sa.push_back(double(c.bytes) / y.store_ns * 1e9);
    rb.push_back(double(c.bytes) / z.read_ns * 1e9);
    sb.push_back(double(c.bytes) / z.store_ns * 1e9);
    ov.push_back(z.overlap_ns / std::min(z.read_ns, z.store_ns));
  }
  out.read_alone_Bps = median(ra);
  out.store_alone_Bps = median(sa);
  out.read_both_Bps = median(rb);
  out.store_both_Bps = median(sb);
  out.both_Bps = out.read_both_Bps + out.store_both_Bps;
  out.overlap = median(ov);
  // Every store of the last run landed: the destination holds its pattern
  // (vector i: i + salt, +1, +2, +3; each run's salt differs from the last's).
  {
    const uint64_t vecs = c.bytes / 16, chunk = std::min<uint64_t>(vecs, 1u << 22);  // 64 MiB at a time
    std::vector<uint32_t> got(c.path == DuplexPath::host ? 0 : 4 * chunk);
    for (uint64_t v0 = 0; v0 < vecs; v0 += chunk) {
      const uint64_t n = std::min(chunk, vecs - v0);
      const uint32_t* w = nullptr;
      if (c.path == DuplexPath::host) {
        w = static_cast<const uint32_t*>(dst.host) + 4 * v0;
      } else {
        XSTAGE_CUDA(cudaMemcpy(got.data(), static_cast<const uint32_t*>(dst.dev) + 4 * v0, 16 * n,
                               cudaMemcpyDefault));
        w = got.data();
      }
      for (uint64_t i = 0; i < n; ++i) {
        const uint32_t x = uint32_t(v0 + i) + salt;
        const uint32_t* v = w + 4 * i;
        out.store_mismatches += v[0] != x || v[1] != x + 1 || v[2] != x + 2 || v[3] != x + 3;
      }
    }
    out.checked_vectors = vecs;
  }
  uint64_t ck[2] = {0, 0};
  XSTAGE_CUDA(probe::launch_calibrate(100'000, reinterpret_cast<uint64_t*>(clock.ptr), nullptr));
  XSTAGE_CUDA(cudaDeviceSynchronize());
  XSTAGE_CUDA(cudaMemcpy(ck, clock.ptr, sizeof ck, cudaMemcpyDeviceToHost));
  out.sm_clock_mhz = ck[0] > 0 ? 1e3 * double(ck[1]) / double(ck[0]) : 0.0;
  return out;
}

}  // namespace xstage
