#pragma once
// The fused Ulysses attention (docs/design/ulysses.md) for one rank, on
// buffers the caller owns: a framework that manages memory, peers and streams
// itself (python/xstage over torch symmetric memory) hands in the tables of
// every rank's output and flag arrays, as the World's symmetric buffers do for
// UlyssesAttention. Same kernels, flag layout and tile orders; nothing here
// allocates, synchronises or talks to other ranks.
//
//   inputs   this rank's head-sharded Q, K, V [B, S, H/P, D] (bf16, element
//            strides for B, S and H as in xstage/attention/attention.hpp);
//   outputs  rank d's sequence-sharded [B, S_d, H, D] (bf16, contiguous) at
//            out_table[d]; rows as in xstage/ulysses/ulysses_layout.hpp (torch.chunk);
//   flags    flag_table[d]: rank d's plan.flag_slots uint64 completion flags.
//            Every launch publishes `epoch` into the flags its tiles complete,
//            and the kernel ends once this rank's own flags all hold at least
//            `epoch` (the receiver wait). Flags are never reset by the kernel:
//            epochs must grow from launch to launch on a flag array, and the
//            caller orders a launch after every rank is done with the output
//            it overwrites.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "xstage/attention/attention.hpp"
#include "xstage/comm/remote_store.hpp"
#include "xstage/ulysses/ulysses.hpp"

namespace xstage {

struct UlyssesFusedShape {
  int P = 1, rank = 0;
  int64_t B = 0, S = 0, H = 0, D = 0;  // S: the global sequence length; H: all heads
};

// Sizes a caller allocates, derived from the shape (after validation).
struct UlyssesFusedPlan {
  int block_m = 0;          // query rows of a tile (the m-blocks the flags count)
  int m_blocks = 0;         // ceil(S / block_m)
  int64_t chunk = 0;        // ceil(S / P): rank d owns rows [d chunk, min(S, (d + 1) chunk))
  int64_t seq_rows = 0;     // S_rank, possibly 0
  int64_t out_elems = 0;    // bf16 elements of the largest output shard (rank 0's): every rank's capacity
  int64_t flag_slots = 0;   // uint64 flags of one rank's array
};

// Throws xstage::Error ("ulysses: <what>: expected <...>, got <...>") for a
// bad shape or kernel: D not 64 or 128, a size < 1, H % P != 0, rank outside
// [0, P), S >= 2^31, or tile and flag counts past the kernels' 32-bit indices.
UlyssesFusedPlan plan_ulysses_fused(const UlyssesFusedShape& shape,
                                    AttentionKernel kernel = AttentionKernel::wgmma_pingpong);

// The tile-order table the launch reads ([P * m_blocks] ints, every rank's
// order; ulysses_tile_order), to be copied to device memory once per shape.
std::vector<int> ulysses_fused_tile_order(const UlyssesFusedShape& shape, TileOrder order,
                                          AttentionKernel kernel = AttentionKernel::wgmma_pingpong);

struct UlyssesFusedArgs {
  UlyssesFusedShape shape;
  const void* q = nullptr;  // bf16 device pointers, head-sharded [B, S, H/P, D]
  const void* k = nullptr;
  const void* v = nullptr;
  AttentionStrides q_stride, k_stride, v_stride;
  void* const* out_table = nullptr;       // device [P]: rank d's output shard
  uint64_t* const* flag_table = nullptr;  // device [P]: rank d's flag array
  const int* tile_order = nullptr;        // device: ulysses_fused_tile_order of the same shape and kernel
  void* timeout_record = nullptr;         // device, ulysses_timeout_record_bytes(), zeroed before first use
  uint64_t epoch = 1;                     // > every value this rank's flags hold before the launch
  float scale = NAN;                      // NaN: 1/sqrt(D)
  std::optional<StorePath> store;         // none: default_store_path(kernel, fused, flags)
  Completion flags = Completion::at_exit;
  int paced_rows = 0;                     // paced paths: 0 for kDefaultPacedRows
  double timeout_s = 60;                  // the receiver wait's limit
  AttentionKernel kernel = AttentionKernel::wgmma_pingpong;  // or mma_sync
};

// Validates (shape, pointers, strides, store path and flag timing; throws
// xstage::Error naming the argument), then launches on `stream`.
void ulysses_fused_forward(const UlyssesFusedArgs& args, cudaStream_t stream);

// The receiver wait's timeout record: its size, and what a host copy of it
// says ("" while no wait timed out).
size_t ulysses_timeout_record_bytes();
std::string describe_ulysses_timeout(const void* host_record);

}  // namespace xstage
