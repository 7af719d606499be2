// The all-to-all versions on a World, and the bit-exact check against the CPU
// reference. Every version starts from the same block list
// (UlyssesLayout::blocks): only how the blocks are moved differs.
#include "xstage/comm/a2a.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <map>

#include <fmt/format.h>

#include "device_copy_list.hpp"
#include "xstage/core/error.hpp"

namespace xstage {

std::string to_string(A2aVersion v) {
  switch (v) {
    case A2aVersion::copy_engine: return "copy-engine";
    case A2aVersion::store_kernel: return "store-kernel";
    case A2aVersion::nccl: return "nccl";
  }
  return "?";
}

A2aVersion parse_a2a_version(std::string_view t) {
  if (t == "copy-engine") return A2aVersion::copy_engine;
  if (t == "store-kernel") return A2aVersion::store_kernel;
  if (t == "nccl") return A2aVersion::nccl;
  throw Error(fmt::format("--versions: expected copy-engine, store-kernel or nccl, got '{}'", t));
}

std::vector<A2aVersion> available_versions(Backend b) {
  std::vector<A2aVersion> v = {A2aVersion::copy_engine, A2aVersion::store_kernel};
  if (b == Backend::nccl) v.push_back(A2aVersion::nccl);
  return v;
}

size_t nccl_stage_bytes(const UlyssesLayout& l) { return static_cast<size_t>(l.shape().P) * l.slot_bytes(); }

A2aBuffers alloc_a2a_buffers(World& w, size_t shard_capacity, size_t stage_capacity) {
  A2aBuffers b;
  b.shard_capacity = shard_capacity;
  b.stage_capacity = stage_capacity;
  b.input.assign(w.size(), nullptr);
  b.send_stage.assign(w.size(), nullptr);
  b.recv_stage.assign(w.size(), nullptr);
  for (int r : w.local_ranks()) {
    b.input[r] = w.alloc_local(r, shard_capacity);
    if (stage_capacity) {
      b.send_stage[r] = w.alloc_local(r, stage_capacity);
      b.recv_stage[r] = w.alloc_local(r, stage_capacity);
    }
  }
  b.output = &w.alloc_symmetric(shard_capacity);
  return b;
}

namespace {
char* at(void* base, size_t offset) { return static_cast<char*>(base) + offset; }

comm::Copy2D to_copy(const void* src, size_t src_pitch, void* dst, size_t dst_pitch, const BlockCopy& blk) {
  comm::Copy2D c;
  c.src = src;
  c.dst = dst;
  c.src_pitch = src_pitch;
  c.dst_pitch = dst_pitch;
  c.width = blk.width;
  c.height = blk.height;
  return c;
}
}  // namespace

struct A2aOp::Impl {
  World& world;
  A2aVersion version;
  // copy-engine: the blocks each local source rank issues.
  std::vector<std::pair<int, comm::Copy2D>> ce_copies;
  // store-kernel: one list per GPU, launched on the stream of the first rank
  // on it; nccl: pack and unpack lists of the one local rank.
  std::vector<std::pair<int, std::unique_ptr<DeviceCopyList>>> launches;
  std::unique_ptr<DeviceCopyList> pack, unpack;
  int nccl_rank = 0;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t slot_bytes = 0;

  Impl(World& w, A2aVersion v) : world(w), version(v) {}

  void prepare_direct(const A2aBuffers& b, const std::vector<BlockCopy>& blocks) {
    std::map<int, std::pair<int, std::vector<comm::Copy2D>>> by_device;  // device -> (first rank, list)
    for (const auto& blk : blocks) {
      if (!world.is_local(blk.src_rank)) continue;
      const comm::Copy2D c = to_copy(at(b.input[blk.src_rank], blk.src_offset), blk.src_pitch,
                                     at(b.output->ptrs[blk.dst_rank], blk.dst_offset), blk.dst_pitch, blk);
      if (version == A2aVersion::copy_engine) {
        ce_copies.emplace_back(blk.src_rank, c);
      } else {
        auto& entry = by_device.try_emplace(world.device_of(blk.src_rank), blk.src_rank, std::vector<comm::Copy2D>{})
                          .first->second;
        entry.second.push_back(c);
      }
    }
    for (auto& [device, entry] : by_device)
      launches.emplace_back(entry.first, std::make_unique<DeviceCopyList>(device, entry.second));
  }

  // Pack my blocks into per-peer slots, NCCL moves whole slots, unpack.
  void prepare_nccl(const A2aBuffers& b, const UlyssesLayout& l, A2aDirection d) {
    nccl_rank = world.local_ranks().front();
    slot_bytes = l.slot_bytes();
    if (b.stage_capacity < nccl_stage_bytes(l))
      throw Error(fmt::format("nccl all-to-all: staging holds {} bytes; expected at least {}, what this layout needs",
                              b.stage_capacity,
                              nccl_stage_bytes(l)));
    send = b.send_stage[nccl_rank];
    recv = b.recv_stage[nccl_rank];
    std::vector<comm::Copy2D> pack_list, unpack_list;
    for (const auto& blk : l.pack_blocks(d, nccl_rank))
      pack_list.push_back(to_copy(at(b.input[nccl_rank], blk.src_offset), blk.src_pitch,
                                  at(b.send_stage[nccl_rank], blk.dst_offset), blk.dst_pitch, blk));
    for (const auto& blk : l.unpack_blocks(d, nccl_rank))
      unpack_list.push_back(to_copy(at(b.recv_stage[nccl_rank], blk.src_offset), blk.src_pitch,
                                    at(b.output->ptrs[nccl_rank], blk.dst_offset), blk.dst_pitch, blk));
    const int device = world.device_of(nccl_rank);
    pack = std::make_unique<DeviceCopyList>(device, pack_list);
    unpack = std::make_unique<DeviceCopyList>(device, unpack_list);
  }
};

A2aOp::A2aOp(World& w, const A2aBuffers& b, const UlyssesLayout& l, A2aDirection d, A2aVersion v)
    : impl_(std::make_unique<Impl>(w, v)) {
  if (l.shape().P != w.size())
    throw Error(fmt::format("all-to-all: layout for {} ranks on a world of {}; expected a layout of the world's size",
                            l.shape().P, w.size()));
  for (int r : w.local_ranks())
    if (l.src_shard_bytes(d, r) > b.shard_capacity || l.dst_shard_bytes(d, r) > b.shard_capacity)
      throw Error(fmt::format("all-to-all: rank {} needs {} / {} bytes; expected at most {}, what the buffers hold", r,
                              l.src_shard_bytes(d, r), l.dst_shard_bytes(d, r), b.shard_capacity));
  if (v == A2aVersion::nccl) {
    if (w.backend() != Backend::nccl) throw Error("the nccl all-to-all version on another backend; expected --backend nccl");
    impl_->prepare_nccl(b, l, d);
  } else {
    impl_->prepare_direct(b, l.blocks(d));
  }
}

A2aOp::~A2aOp() = default;

void A2aOp::enqueue() {
  Impl& m = *impl_;
  World& w = m.world;
  switch (m.version) {
    case A2aVersion::copy_engine:
      for (const auto& [rank, c] : m.ce_copies) {
        XSTAGE_CUDA(cudaSetDevice(w.device_of(rank)));
        XSTAGE_CUDA(cudaMemcpy2DAsync(c.dst, c.dst_pitch, c.src, c.src_pitch, c.width, c.height, cudaMemcpyDefault,
                                      w.stream(rank)));
      }
      break;
    case A2aVersion::store_kernel:
      for (const auto& [rank, list] : m.launches) list->launch(w.stream(rank));
      break;
    case A2aVersion::nccl:
      m.pack->launch(w.stream(m.nccl_rank));
      w.native_all_to_all(m.send, m.recv, m.slot_bytes);
      m.unpack->launch(w.stream(m.nccl_rank));
      break;
  }
}

std::vector<uint8_t> random_shard(size_t bytes, uint64_t seed, int rank) {
  // splitmix64: fast, and the same bytes in every process.
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(rank + 1) * 0xBF58476D1CE4E5B9ull;
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes; i += 8) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(out.data() + i, &z, std::min<size_t>(8, bytes - i));
  }
  return out;
}

std::string check_a2a(World& w, const A2aBuffers& b, A2aOp& op, const UlyssesLayout& l, A2aDirection d,
                      uint64_t seed) {
  const int P = l.shape().P;
  RankBuffers in(P);
  for (int r = 0; r < P; ++r) in[r] = random_shard(l.src_shard_bytes(d, r), seed, r);
  // Poison copied from the host: it works for device, mapped-host and NCCL
  // window memory alike.
  const std::vector<uint8_t> poison(b.shard_capacity, 0xFF);
  for (int r : w.local_ranks()) {
    XSTAGE_CUDA(cudaSetDevice(w.device_of(r)));
    XSTAGE_CUDA(cudaMemcpy(b.input[r], in[r].data(), in[r].size(), cudaMemcpyHostToDevice));
    XSTAGE_CUDA(cudaMemcpy(b.output->ptrs[r], poison.data(), poison.size(), cudaMemcpyDefault));
    // From pageable memory cudaMemcpy may return before its DMA lands, and the
    // world's streams do not wait for the legacy stream.
    XSTAGE_CUDA(cudaDeviceSynchronize());
  }
  w.barrier();  // every destination is poisoned before anyone writes
  w.fork();
  op.enqueue();
  w.join();
  w.barrier();  // every rank's writes have landed
  const RankBuffers want = reference_all_to_all(l, d, in);
  for (int r : w.local_ranks()) {
    // The shard, and a little past it: it must still hold the poison.
    const size_t n = want[r].size(), past = std::min<size_t>(b.shard_capacity - n, 4096);
    std::vector<uint8_t> got(n + past);
    XSTAGE_CUDA(cudaSetDevice(w.device_of(r)));
    XSTAGE_CUDA(cudaMemcpy(got.data(), b.output->ptrs[r], got.size(), cudaMemcpyDefault));
    const bool tail_poisoned = std::all_of(got.begin() + n, got.end(), [](uint8_t x) { return x == 0xFF; });
    if (tail_poisoned && std::memcmp(got.data(), want[r].data(), n) == 0) continue;
    for (size_t i = 0; i < got.size(); ++i) {
      const uint8_t expected = i < n ? want[r][i] : 0xFF;
      if (got[i] != expected)
        return fmt::format("rank {} byte {} (shard of {} bytes{}): expected 0x{:02x}, got 0x{:02x}", r, i, n,
                           i < n ? "" : ", written past its end", expected, got[i]);
    }
  }
  return "";
}

}  // namespace xstage
