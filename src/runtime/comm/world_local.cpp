// The single-process backends: `emulated` (P logical ranks on one GPU) and
// `peer` (rank r on GPU r, CUDA peer access). They differ only in where rank r
// runs; UVA makes every pointer valid from every device of the process.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "xstage/comm/world.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"

namespace xstage {

namespace {

class LocalWorld final : public World {
 public:
  LocalWorld(const WorldOptions& o) : World(o.backend, o.placement, o.ranks), device_(o.device) {}

  ~LocalWorld() override {
    for (auto it = host_allocs_.rbegin(); it != host_allocs_.rend(); ++it) (void)cudaFreeHost(*it);
  }

  void init() {
    const int gpus = cuda_device_count();
    if (backend() == Backend::emulated) {
      if (device_ < 0 || device_ >= gpus)
        throw Error(fmt::format("emulated backend: GPU {} requested, {} visible; expected a visible GPU", device_, gpus));
    } else {
      if (gpus < size())
        throw Error(fmt::format("peer backend: {} ranks need {} GPUs (one per rank), this process sees {}; expected as many "
                                "GPUs as ranks, or --backend emulated to run {} ranks on one GPU",
                                size(), size(), gpus, size()));
      enable_peer_access();
    }
    std::vector<int> ranks(size());
    for (int r = 0; r < size(); ++r) ranks[r] = r;
    init_streams(ranks);
  }

  int device_of(int rank) const override { return backend() == Backend::emulated ? device_ : rank; }

  const SymmetricBuffer& alloc_symmetric(size_t bytes) override {
    auto buf = std::make_unique<SymmetricBuffer>();
    buf->bytes = bytes;
    for (int r = 0; r < size(); ++r) buf->ptrs.push_back(alloc_one(r, bytes));
    buf->device_tables = upload_tables(buf->ptrs);
    buffers_.push_back(std::move(buf));
    return *buffers_.back();
  }

  std::string describe() const override {
    const std::string where =
        backend() == Backend::emulated ? fmt::format("on GPU {}", device_) : fmt::format("on GPUs 0..{}", size() - 1);
    return fmt::format("{}, {} ranks {}, {} buffers", to_string(backend()), size(), where, to_string(placement()));
  }

 private:
  void enable_peer_access() {
    for (int a = 0; a < size(); ++a)
      for (int b = 0; b < size(); ++b) {
        if (a == b) continue;
        int ok = 0;
        XSTAGE_CUDA(cudaDeviceCanAccessPeer(&ok, a, b));
        if (!ok) throw Error(fmt::format("peer backend: GPU {} cannot access GPU {} (no P2P path); expected GPUs with peer access", a,
                                   b));
        XSTAGE_CUDA(cudaSetDevice(a));
        const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled)
          (void)cudaGetLastError();
        else
          XSTAGE_CUDA(e);
      }
  }

  // Rank r's copy of a symmetric buffer, zeroed.
  void* alloc_one(int rank, size_t bytes) {
    bytes = std::max<size_t>(bytes, 1);
    XSTAGE_CUDA(cudaSetDevice(device_of(rank)));
    if (placement() == Placement::device) {
      void* p = alloc_local(rank, bytes);
      XSTAGE_CUDA(cudaMemset(p, 0, bytes));
      return p;
    }
    // Portable: mapped into every device of the process; Mapped: the GPU
    // addresses it directly, so a store from a kernel is a PCIe posted write.
    void* h = nullptr;
    XSTAGE_CUDA(cudaHostAlloc(&h, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    host_allocs_.push_back(h);
    std::memset(h, 0, bytes);
    void* d = nullptr;
    XSTAGE_CUDA(cudaHostGetDevicePointer(&d, h, 0));
    return d;
  }

  int device_;
  std::vector<std::unique_ptr<SymmetricBuffer>> buffers_;
  std::vector<void*> host_allocs_;
};

}  // namespace

std::unique_ptr<World> make_local_world(const WorldOptions& o) {
  if (o.ranks < 1) throw Error(fmt::format("--ranks: expected a whole number >= 1, got {}", o.ranks));
  auto w = std::make_unique<LocalWorld>(o);
  w->init();  // after construction, so that a failure still runs the destructor
  return w;
}

}  // namespace xstage
