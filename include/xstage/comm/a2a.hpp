#pragma once
// The Ulysses all-to-all baseline on a World, in each available version (its
// nccl-tests-style benchmark: src/harness/comm/a2a_bench.hpp). The permute is
// fused into the transfer: no version runs a separate transpose over the
// whole tensor.
//   copy-engine   one cudaMemcpy2DAsync per (src rank, dst rank, batch); the
//                 pitches do the permute. Issued on the source rank's stream.
//   store-kernel  one kernel launch per GPU (one for every rank under
//                 `emulated`), warps storing rows to the peer pointers with the
//                 widest aligned stores (16 bytes for bf16 with D % 8 == 0).
//   nccl          pack to per-peer slots, ncclAlltoAll, unpack (nccl backend),
//                 timed together.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "xstage/comm/world.hpp"
#include "xstage/core/device.hpp"
#include "xstage/ulysses/ulysses_layout.hpp"

namespace xstage {

enum class A2aVersion { copy_engine, store_kernel, nccl };
std::string to_string(A2aVersion v);  // "copy-engine", "store-kernel", "nccl"
A2aVersion parse_a2a_version(std::string_view text);
std::vector<A2aVersion> available_versions(Backend b);

// Each local rank's source shard (its private device memory) and every
// rank's destination shard (a symmetric buffer, written remotely), sized for
// the largest layout they will serve.
struct A2aBuffers {
  std::vector<void*> input;  // [rank]; nullptr for ranks of other processes
  const SymmetricBuffer* output = nullptr;
  size_t shard_capacity = 0;
  std::vector<void*> send_stage, recv_stage;  // [rank]; the nccl version only
  size_t stage_capacity = 0;
};
// Padded per-rank staging NCCL's all-to-all needs: P slots of B * ceil(S/P) rows.
size_t nccl_stage_bytes(const UlyssesLayout& layout);
A2aBuffers alloc_a2a_buffers(World& world, size_t shard_capacity, size_t stage_capacity = 0);

// One all-to-all, prepared (addresses resolved, descriptor lists uploaded).
class A2aOp {
 public:
  A2aOp(World& world, const A2aBuffers& buffers, const UlyssesLayout& layout, A2aDirection direction,
        A2aVersion version);
  ~A2aOp();
  A2aOp(const A2aOp&) = delete;
  A2aOp& operator=(const A2aOp&) = delete;
  // Enqueues on the local ranks' streams; call between world.fork() and world.join().
  void enqueue();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Rank r's random source shard for `seed`: the same bytes in every process.
std::vector<uint8_t> random_shard(size_t bytes, uint64_t seed, int rank);

// Fills the local inputs with random_shard, poisons every local destination
// with 0xFF bytes, runs `op` once and compares each local destination with the
// CPU reference. Returns "" when bit-exact, else the first mismatch (rank, byte
// offset, expected, got). Collective under the nccl backend.
std::string check_a2a(World& world, const A2aBuffers& buffers, A2aOp& op, const UlyssesLayout& layout,
                      A2aDirection direction, uint64_t seed);

}  // namespace xstage
