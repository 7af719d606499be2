// The nccl backend: one process per GPU, symmetric buffers in NCCL 2.28
// windows (ncclMemAlloc + ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC)),
// peer pointers from the device API. Built only when NCCL is found.
//
// Bootstrap: RANK, WORLD_SIZE, LOCAL_RANK as torchrun sets them; the
// ncclUniqueId goes from rank 0 to the others through the file named by
// XSTAGE_NCCL_ID_FILE (one host: `xstage launch` sets it to a fresh path).
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device/core.h>
#include <nccl_device/impl/comm__types.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "device/comm/nccl_peer_pointers.hpp"
#include "xstage/comm/world.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"

namespace xstage {

namespace {

void check_nccl(ncclResult_t r, ncclComm_t comm, const char* what) {
  if (r == ncclSuccess) return;
  const char* last = comm ? ncclGetLastError(comm) : ncclGetLastError(nullptr);
  throw Error(fmt::format("{}: {}{}{}", what, ncclGetErrorString(r), last && *last ? ": " : "", last ? last : ""));
}
#define XSTAGE_NCCL(comm, call) check_nccl((call), (comm), #call)

ncclUniqueId exchange_unique_id(const LaunchEnv& env) {
  ncclUniqueId id{};
  if (env.world_size == 1) {
    XSTAGE_NCCL(nullptr, ncclGetUniqueId(&id));
    return id;
  }
  const char* path = std::getenv("XSTAGE_NCCL_ID_FILE");
  if (!path || !*path)
    throw Error("nccl backend: XSTAGE_NCCL_ID_FILE is not set (rank 0 writes the NCCL unique id there and the "
                "other ranks read it); expected it set: `xstage launch` sets it, under torchrun export a fresh "
                "path on a shared file system");
  if (env.rank == 0) {
    XSTAGE_NCCL(nullptr, ncclGetUniqueId(&id));
    // Written aside, then renamed: readers never see half an id.
    const std::string tmp = fmt::format("{}.tmp.{}", path, getpid());
    {
      std::ofstream f(tmp, std::ios::binary);
      f.write(reinterpret_cast<const char*>(&id), sizeof id);
      if (!f) throw Error(fmt::format("nccl backend: cannot write {}; expected a writable XSTAGE_NCCL_ID_FILE", tmp));
    }
    if (std::rename(tmp.c_str(), path) != 0)
      throw Error(fmt::format("nccl backend: cannot rename {} to {}; expected a writable XSTAGE_NCCL_ID_FILE", tmp, path));
    return id;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (;;) {
    std::ifstream f(path, std::ios::binary);
    if (f.read(reinterpret_cast<char*>(&id), sizeof id)) return id;
    if (std::chrono::steady_clock::now() > deadline)
      throw Error(fmt::format("nccl backend: rank {} waited 120 s for rank 0's NCCL id in {}; expected rank 0 to write it "
                              "there (the same XSTAGE_NCCL_ID_FILE on every rank)", env.rank, path));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

class NcclWorld final : public World {
 public:
  NcclWorld(const WorldOptions& o, const LaunchEnv& env)
      : World(Backend::nccl, o.placement, env.world_size), env_(env) {}

  ~NcclWorld() override {
    // The reverse of creation: device communicator, windows, communicator.
    if (dev_comm_created_) (void)ncclDevCommDestroy(comm_, &dev_comm_);
    for (auto it = windows_.rbegin(); it != windows_.rend(); ++it) {
      (void)ncclCommWindowDeregister(comm_, it->first);
      (void)ncclMemFree(it->second);
    }
    if (comm_) (void)ncclCommDestroy(comm_);
  }

  void init() {
    if (placement() == Placement::host)
      throw Error("nccl backend: --placement host, but its buffers are NCCL symmetric windows in device memory; "
                  "expected --placement device (host is for the emulated and peer backends)");
    // NVLink multicast (NVLS) stays off: xstage never uses it.
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    const int gpus = cuda_device_count();
    if (env_.local_rank >= gpus)
      throw Error(fmt::format("nccl backend: LOCAL_RANK = {} but this process sees {} GPUs; expected a GPU a rank (two "
                              "ranks cannot share one GPU under NCCL; use --backend emulated on one GPU)",
                              env_.local_rank, gpus));
    XSTAGE_CUDA(cudaSetDevice(env_.local_rank));
    init_streams({env_.rank});
    const ncclUniqueId id = exchange_unique_id(env_);
    XSTAGE_NCCL(nullptr, ncclCommInitRank(&comm_, env_.world_size, id, env_.rank));

    ncclDevCommRequirements reqs{};  // no barriers, no GIN, no multimem: only the window table
    const ncclResult_t r = ncclDevCommCreate(comm_, &reqs, &dev_comm_);
    if (r != ncclSuccess)
      throw Error(fmt::format("nccl backend: ncclDevCommCreate failed ({}): NCCL's device API (symmetric memory) is "
                              "unavailable here; expected NCCL with symmetric memory; {}",
                              ncclGetErrorString(r), ncclGetLastError(comm_)));
    dev_comm_created_ = true;
    if (dev_comm_.lsaSize != size())
      throw Error(fmt::format("nccl backend: only {} of {} ranks share load/store-accessible memory with rank {} "
                              "(NCCL's LSA team); expected all ranks on one NVLink/P2P domain (the kernels store to "
                              "every peer directly)",
                              dev_comm_.lsaSize, size(), env_.rank));
    scratch_ = static_cast<double*>(alloc_local(env_.rank, sizeof(double)));
  }

  int device_of(int) const override { return env_.local_rank; }

  const SymmetricBuffer& alloc_symmetric(size_t bytes) override {
    // Every rank registers the same size; windows want 4 KiB multiples.
    const size_t align = NCCL_WIN_REQUIRED_ALIGNMENT;
    const size_t padded = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
    void* p = nullptr;
    XSTAGE_NCCL(comm_, ncclMemAlloc(&p, padded));
    ncclWindow_t win = nullptr;
    const ncclResult_t r = ncclCommWindowRegister(comm_, p, padded, &win, NCCL_WIN_COLL_SYMMETRIC);
    if (r != ncclSuccess || win == nullptr) {
      (void)ncclMemFree(p);
      throw Error(fmt::format("nccl backend: ncclCommWindowRegister({} bytes, NCCL_WIN_COLL_SYMMETRIC) gave {}: "
                              "symmetric memory is unsupported here (NCCL fell back to local registration); expected NCCL "
                              "with symmetric memory; {}",
                              padded, r == ncclSuccess ? "no window" : ncclGetErrorString(r), ncclGetLastError(comm_)));
    }
    windows_.emplace_back(win, p);
    XSTAGE_CUDA(cudaMemsetAsync(p, 0, padded, stream(env_.rank)));

    auto buf = std::make_unique<SymmetricBuffer>();
    buf->bytes = bytes;
    auto* table = static_cast<void**>(alloc_local(env_.rank, size_t(size()) * sizeof(void*)));
    comm::launch_nccl_peer_pointers(win, size(), table, stream(env_.rank));
    buf->ptrs.resize(size());
    XSTAGE_CUDA(cudaMemcpyAsync(buf->ptrs.data(), table, buf->ptrs.size() * sizeof(void*), cudaMemcpyDeviceToHost,
                                stream(env_.rank)));
    barrier();  // zeroed everywhere before anyone writes
    for (int p2 = 0; p2 < size(); ++p2)
      if (!buf->ptrs[p2])
        throw Error(fmt::format("nccl backend: the window has no load/store address for rank {}: it fell back to a "
                                "local registration; expected NCCL with symmetric memory",
                                p2));
    buf->device_tables = {static_cast<void* const*>(table)};
    buffers_.push_back(std::move(buf));
    return *buffers_.back();
  }

  void barrier() override {
    World::barrier();
    XSTAGE_NCCL(comm_, ncclAllReduce(scratch_, scratch_, 1, ncclDouble, ncclSum, comm_, stream(env_.rank)));
    XSTAGE_CUDA(cudaStreamSynchronize(stream(env_.rank)));
  }

  double max_over_ranks(double v) override {
    XSTAGE_CUDA(cudaMemcpyAsync(scratch_, &v, sizeof v, cudaMemcpyHostToDevice, stream(env_.rank)));
    XSTAGE_NCCL(comm_, ncclAllReduce(scratch_, scratch_, 1, ncclDouble, ncclMax, comm_, stream(env_.rank)));
    XSTAGE_CUDA(cudaMemcpyAsync(&v, scratch_, sizeof v, cudaMemcpyDeviceToHost, stream(env_.rank)));
    XSTAGE_CUDA(cudaStreamSynchronize(stream(env_.rank)));
    return v;
  }

  void native_all_to_all(const void* send, void* recv, size_t bytes_per_peer) override {
    XSTAGE_NCCL(comm_, ncclAlltoAll(send, recv, bytes_per_peer, ncclUint8, comm_, stream(env_.rank)));
  }

  void native_send_recv(const std::vector<PeerChunk>& send, const std::vector<PeerChunk>& recv) override {
    if (int(send.size()) != size() || int(recv.size()) != size())
      throw Error(fmt::format("nccl send/recv: {} send and {} receive chunks, expected one per rank ({})", send.size(),
                              recv.size(), size()));
    const cudaStream_t s = stream(env_.rank);
    XSTAGE_NCCL(comm_, ncclGroupStart());
    for (int p = 0; p < size(); ++p) {
      if (send[p].bytes > 0) XSTAGE_NCCL(comm_, ncclSend(send[p].ptr, send[p].bytes, ncclUint8, p, comm_, s));
      if (recv[p].bytes > 0) XSTAGE_NCCL(comm_, ncclRecv(recv[p].ptr, recv[p].bytes, ncclUint8, p, comm_, s));
    }
    XSTAGE_NCCL(comm_, ncclGroupEnd());
  }

  std::string describe() const override {
    return fmt::format("nccl {}.{}.{}, {} ranks (one process per GPU), rank {} on GPU {}", NCCL_MAJOR, NCCL_MINOR,
                       NCCL_PATCH, size(), env_.rank, env_.local_rank);
  }

 private:
  LaunchEnv env_;
  ncclComm_t comm_ = nullptr;
  ncclDevComm dev_comm_{};
  bool dev_comm_created_ = false;
  double* scratch_ = nullptr;
  std::vector<std::pair<ncclWindow_t, void*>> windows_;
  std::vector<std::unique_ptr<SymmetricBuffer>> buffers_;
};

}  // namespace

std::unique_ptr<World> make_nccl_world(const WorldOptions& o) {
  const LaunchEnv env = read_launch_env();
  if (o.ranks >= 1 && o.ranks != env.world_size)
    throw Error(fmt::format("nccl backend: {} ranks asked, WORLD_SIZE = {}; expected --ranks equal to WORLD_SIZE", o.ranks,
                            env.world_size));
  auto w = std::make_unique<NcclWorld>(o, env);
  w->init();
  return w;
}

}  // namespace xstage
