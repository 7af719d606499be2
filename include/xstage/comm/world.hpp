#pragma once
// A world of P ranks with symmetric buffers: every allocation has the same
// size on every rank, and the world hands kernels plain device arrays of every
// rank's pointer, so a kernel never knows which backend made them.
//
// Backends (docs/design/comm.md explains the shapes):
//   emulated  P logical ranks on one GPU; the symmetric buffers live in device
//             memory (cudaMalloc) or in pinned host memory mapped into the GPU
//             (Placement::host, a real PCIe posted-write path).
//   peer      one process drives P GPUs of one host (rank r on GPU r) through
//             CUDA peer access.
//   nccl      one process per GPU (RANK, WORLD_SIZE, LOCAL_RANK from
//             `xstage launch` or torchrun); NCCL 2.28 symmetric windows, peer
//             pointers from ncclGetPeerPointer.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct CUstream_st;  // cudaStream_t without pulling the CUDA headers in

namespace xstage {

using Stream = CUstream_st*;

enum class Backend { emulated, peer, nccl };
enum class Placement { device, host };
std::string to_string(Backend b);
std::string to_string(Placement p);
Backend parse_backend(std::string_view text);      // throws xstage::Error
Placement parse_placement(std::string_view text);  // throws xstage::Error

struct WorldOptions {
  Backend backend = Backend::emulated;
  int ranks = 0;  // P; 0 means "from WORLD_SIZE" (nccl only)
  Placement placement = Placement::device;
  int device = 0;  // emulated: the GPU that runs every rank
};

// Where the process-per-rank variables say this process sits. Throws
// xstage::Error naming the variable when one is missing or malformed.
struct LaunchEnv {
  int rank = 0, world_size = 1, local_rank = 0;
};
LaunchEnv read_launch_env();
bool launch_env_present();  // WORLD_SIZE is set

// Settles o.ranks before any GPU is touched: nccl takes WORLD_SIZE (and
// rejects host placement: NCCL windows live in device memory), emulated
// defaults to `emulated_default`; peer keeps 0 ("every visible GPU").
// Throws xstage::Error naming the option.
void resolve_world_ranks(WorldOptions& o, int emulated_default);

// One symmetric allocation. ptrs[p] is rank p's buffer as this process
// addresses it; device_table(i) is the same array in the memory of local rank
// i's GPU, ready to pass to a kernel.
struct SymmetricBuffer {
  size_t bytes = 0;
  std::vector<void*> ptrs;
  std::vector<void* const*> device_tables;  // one per local rank
  void* const* device_table(int local_index) const { return device_tables.at(local_index); }
  uint64_t* flag(int rank, size_t i) const { return static_cast<uint64_t*>(ptrs.at(rank)) + i; }
};

class World {
 public:
  // Throws xstage::Error with what was asked and what is missing (too few
  // GPUs, no peer access, no NCCL, symmetric memory unsupported ...).
  static std::unique_ptr<World> create(const WorldOptions& options);
  virtual ~World();  // frees what the base owns; never throws
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int size() const { return size_; }
  Backend backend() const { return backend_; }
  Placement placement() const { return placement_; }
  // The ranks this process drives (all of them for emulated and peer, one for nccl).
  const std::vector<int>& local_ranks() const { return local_ranks_; }
  bool is_local(int rank) const;
  int local_index(int rank) const;  // position in local_ranks(); throws if not local
  bool leader() const { return local_ranks_.front() == 0; }  // prints results
  virtual int device_of(int rank) const = 0;                   // local ranks only
  Stream stream(int rank) const { return streams_.at(local_index(rank)); }
  Stream lead_stream() const { return streams_.front(); }

  // Collective over all ranks: `bytes` of symmetric memory per rank (zeroed),
  // placed as placement() says. The world owns it until it is destroyed.
  virtual const SymmetricBuffer& alloc_symmetric(size_t bytes) = 0;
  // `count` uint64_t flags per rank, zeroed, placed like the buffers.
  const SymmetricBuffer& alloc_flags(size_t count) { return alloc_symmetric(count * sizeof(uint64_t)); }
  // Private device memory of a local rank (its input shard, staging ...).
  void* alloc_local(int rank, size_t bytes);

  // Makes every local stream wait for work so far on the lead stream (fork),
  // and the lead stream wait for every local stream (join): time between
  // events on the lead stream then covers the work of every local rank.
  void fork();
  void join();
  // Waits for every local stream, then for every other process.
  virtual void barrier();
  // The largest value over all ranks (identity in one process).
  virtual double max_over_ranks(double v) { return v; }
  // NCCL's all-to-all (nccl backend only): `bytes_per_peer` from send to
  // every rank, on the stream of the local rank.
  virtual void native_all_to_all(const void* send, void* recv, size_t bytes_per_peer);
  // NCCL's point-to-point (nccl backend only), one group on the stream of the
  // local rank: to every rank p, send[p].bytes from send[p].ptr; from every
  // rank p, recv[p].bytes into recv[p].ptr (0 bytes: nothing). Both vectors
  // hold size() entries; a pair's sizes must agree on both sides.
  struct PeerChunk {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  virtual void native_send_recv(const std::vector<PeerChunk>& send, const std::vector<PeerChunk>& recv);
  virtual std::string describe() const;  // "emulated, 8 ranks on GPU 0, host buffers"

 protected:
  World(Backend b, Placement p, int size) : backend_(b), placement_(p), size_(size) {}
  // Creates the streams of the local ranks; subclasses call it once ranks are known.
  void init_streams(std::vector<int> local_ranks);
  // Device copies of `ptrs` on every local rank's GPU, owned by the world.
  std::vector<void* const*> upload_tables(const std::vector<void*>& ptrs);
  // cudaMalloc on `device`, freed with the world.
  void* device_alloc(int device, size_t bytes);

 private:
  struct Alloc {
    int device;
    void* ptr;
  };
  std::vector<Alloc> device_allocs_;
  Backend backend_;
  Placement placement_;
  int size_;
  std::vector<int> local_ranks_;
  std::vector<int> local_devices_;  // device_of(local_ranks_[i]), kept for the destructor
  std::vector<Stream> streams_;
  std::vector<void*> fork_events_;  // cudaEvent_t per local rank
};

// Backend factories (world_local.cpp, world_nccl.cpp).
std::unique_ptr<World> make_local_world(const WorldOptions& options);
std::unique_ptr<World> make_nccl_world(const WorldOptions& options);

}  // namespace xstage
