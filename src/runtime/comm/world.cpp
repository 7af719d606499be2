// What every backend shares: names, the launch environment, streams with
// fork/join, private device allocations and the device copies of pointer tables.
#include "xstage/comm/world.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "device/comm/wait_flag.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"

namespace xstage {

std::string to_string(Backend b) {
  switch (b) {
    case Backend::emulated: return "emulated";
    case Backend::peer: return "peer";
    case Backend::nccl: return "nccl";
  }
  return "?";
}

std::string to_string(Placement p) { return p == Placement::device ? "device" : "host"; }

Backend parse_backend(std::string_view t) {
  if (t == "emulated") return Backend::emulated;
  if (t == "peer") return Backend::peer;
  if (t == "nccl") return Backend::nccl;
  throw Error(fmt::format("--backend: expected emulated, peer or nccl, got '{}'", t));
}

Placement parse_placement(std::string_view t) {
  if (t == "device") return Placement::device;
  if (t == "host") return Placement::host;
  throw Error(fmt::format("--placement: expected device or host, got '{}'", t));
}

namespace {
int env_int(const char* name, int min_value) {
  const char* v = std::getenv(name);
  if (!v || !*v)
    throw Error(fmt::format("{} is not set; expected one process per GPU started with `xstage launch -n N -- COMMAND` "
                            "or torchrun (they set RANK, WORLD_SIZE, LOCAL_RANK)",
                            name));
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < min_value || x > 1 << 20)
    throw Error(fmt::format("{}: expected a whole number >= {}, got '{}'", name, min_value, v));
  return static_cast<int>(x);
}
}  // namespace

bool launch_env_present() {
  const char* v = std::getenv("WORLD_SIZE");
  return v && *v;
}

LaunchEnv read_launch_env() {
  LaunchEnv e;
  e.world_size = env_int("WORLD_SIZE", 1);
  e.rank = env_int("RANK", 0);
  e.local_rank = env_int("LOCAL_RANK", 0);
  if (e.rank >= e.world_size)
    throw Error(fmt::format("RANK = {} is not below WORLD_SIZE = {}; expected 0 <= RANK < WORLD_SIZE", e.rank, e.world_size));
  return e;
}

std::unique_ptr<World> World::create(const WorldOptions& o) {
  if (o.backend == Backend::nccl) return make_nccl_world(o);
  return make_local_world(o);
}

#ifndef XSTAGE_HAVE_NCCL
std::unique_ptr<World> make_nccl_world(const WorldOptions&) {
  throw Error("--backend nccl: this xstage was built without NCCL; expected a build configured with "
              "XSTAGE_NCCL_ROOT pointing at a folder with include/nccl.h and lib/libnccl.so");
}
#endif

World::~World() {
  // Errors are ignored here: after a failed kernel (an illegal address) the context is gone and
  // every call fails, but the process must still exit cleanly.
  for (auto it = device_allocs_.rbegin(); it != device_allocs_.rend(); ++it) {
    (void)cudaSetDevice(it->device);
    (void)cudaFree(it->ptr);
  }
  for (size_t i = 0; i < streams_.size(); ++i) {
    (void)cudaSetDevice(local_devices_[i]);
    if (i < fork_events_.size()) (void)cudaEventDestroy(static_cast<cudaEvent_t>(fork_events_[i]));
    (void)cudaStreamDestroy(streams_[i]);
  }
  (void)cudaGetLastError();
}

bool World::is_local(int rank) const {
  return std::find(local_ranks_.begin(), local_ranks_.end(), rank) != local_ranks_.end();
}

int World::local_index(int rank) const {
  const auto it = std::find(local_ranks_.begin(), local_ranks_.end(), rank);
  if (it == local_ranks_.end()) throw Error(fmt::format("rank {} is not driven by this process; expected one of its local ranks", rank));
  return static_cast<int>(it - local_ranks_.begin());
}

void World::init_streams(std::vector<int> local_ranks) {
  local_ranks_ = std::move(local_ranks);
  for (int r : local_ranks_) {
    const int device = device_of(r);
    const bool new_device = std::find(local_devices_.begin(), local_devices_.end(), device) == local_devices_.end();
    local_devices_.push_back(device);
    XSTAGE_CUDA(cudaSetDevice(device));
    cudaStream_t s = nullptr;
    XSTAGE_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    streams_.push_back(s);  // owned (destroyed with the World) before anything below can throw
    // Ranks' kernels wait on each other's flags; a printf-capable kernel's
    // first launch would wait for every other kernel to end first.
    if (new_device) comm::set_up_printf_buffer(s);
    cudaEvent_t e = nullptr;
    XSTAGE_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    fork_events_.push_back(e);
  }
}

void* World::device_alloc(int device, size_t bytes) {
  XSTAGE_CUDA(cudaSetDevice(device));
  void* p = nullptr;
  XSTAGE_CUDA(cudaMalloc(&p, std::max<size_t>(bytes, 1)));
  device_allocs_.push_back({device, p});
  return p;
}

void* World::alloc_local(int rank, size_t bytes) { return device_alloc(device_of(rank), bytes); }

std::vector<void* const*> World::upload_tables(const std::vector<void*>& ptrs) {
  std::vector<void* const*> tables;
  for (int dev : local_devices_) {
    void* t = device_alloc(dev, ptrs.size() * sizeof(void*));
    XSTAGE_CUDA(cudaMemcpy(t, ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice));
    // The world's streams do not wait for the legacy stream, and a copy from
    // pageable memory may return before it lands: wait here.
    XSTAGE_CUDA(cudaDeviceSynchronize());
    tables.push_back(static_cast<void* const*>(t));
  }
  return tables;
}

void World::fork() {
  auto lead = static_cast<cudaEvent_t>(fork_events_[0]);
  XSTAGE_CUDA(cudaSetDevice(local_devices_[0]));
  XSTAGE_CUDA(cudaEventRecord(lead, streams_[0]));
  for (size_t i = 1; i < streams_.size(); ++i) {
    XSTAGE_CUDA(cudaSetDevice(local_devices_[i]));
    XSTAGE_CUDA(cudaStreamWaitEvent(streams_[i], lead, 0));
  }
}

void World::join() {
  for (size_t i = 1; i < streams_.size(); ++i) {
    XSTAGE_CUDA(cudaSetDevice(local_devices_[i]));
    XSTAGE_CUDA(cudaEventRecord(static_cast<cudaEvent_t>(fork_events_[i]), streams_[i]));
  }
  XSTAGE_CUDA(cudaSetDevice(local_devices_[0]));
  for (size_t i = 1; i < streams_.size(); ++i)
    XSTAGE_CUDA(cudaStreamWaitEvent(streams_[0], static_cast<cudaEvent_t>(fork_events_[i]), 0));
}

void World::barrier() {
  for (size_t i = 0; i < streams_.size(); ++i) {
    XSTAGE_CUDA(cudaSetDevice(local_devices_[i]));
    XSTAGE_CUDA(cudaStreamSynchronize(streams_[i]));
  }
}

void World::native_all_to_all(const void*, void*, size_t) {
  throw Error(fmt::format("NCCL's all-to-all needs --backend nccl; expected it, not {}", to_string(backend_)));
}

void World::native_send_recv(const std::vector<PeerChunk>&, const std::vector<PeerChunk>&) {
  throw Error(fmt::format("NCCL's send/recv needs --backend nccl; expected it, not {}", to_string(backend_)));
}

std::string World::describe() const {
  return fmt::format("{}, {} ranks, {} buffers", to_string(backend_), size_, to_string(placement_));
}

void resolve_world_ranks(WorldOptions& o, int emulated_default) {
  if (o.backend == Backend::nccl) {
    if (o.placement == Placement::host)
      throw Error("--placement host: the nccl backend's buffers are NCCL symmetric windows in device memory; "
                  "expected --placement device, or --backend emulated or peer for host buffers");
    const int world_size = read_launch_env().world_size;
    if (o.ranks >= 1 && o.ranks != world_size)
      throw Error(fmt::format("--ranks {} but WORLD_SIZE = {}; expected them equal (under --backend nccl there is one process "
                              "per rank)",
                              o.ranks, world_size));
    o.ranks = world_size;
  } else if (o.ranks < 1 && o.backend == Backend::emulated) {
    o.ranks = emulated_default;
  }
}

}  // namespace xstage
