#pragma once
// The MoE layer on one GPU, every expert local (docs/design/python.md, "The MoE layer on one GPU"):
//   x [T, H] bf16, topk_ids [T, k] (int32 or int64), topk_weights [T, k]
//   (fp32 or bf16) -> out [T, H] bf16 =
//     sum over slots j of topk_weights[t, j] * W2[e] SwiGLU(W13[e] x[t]), e = topk_ids[t, j]
// in five kernels on the caller's stream, with no host synchronisation (the
// counts and offsets stay on the device, so a CUDA graph can capture it):
//   route count, route scatter (rows in expert order, x rows copied),
//   L1 + SwiGLU x routing weight, L2 (the grouped GEMMs of moe.hpp),
//   combine (each token's k rows summed in fp32 in slot order: the same bits
//   on every run).
// Every buffer is the caller's: one scratch allocation and the GEMMs' split-K
// workspace, sized by moe_local_layer_sizes. The GEMMs' tile and splits are
// chosen on the host from T * k (their row count), never from device counts.
//
// Ids are device data: the host does not read them. An id out of [0, E), or
// one repeated within a token's row, routes that pair nowhere (it adds
// nothing) and the first such pair is recorded in `error` when given (the
// caller reads it when it chooses to synchronise).
#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

namespace xstage {

struct MoeLocalLayerArgs {
  const void* x = nullptr;             // bf16 [T, H]
  const void* w13 = nullptr;           // bf16 [E, 2I, H], gate and up rows interleaved (moe_interleave_w13)
  const void* w2 = nullptr;            // bf16 [E, H, I]
  const void* topk_ids = nullptr;      // [T, k], int64 when ids_int64 else int32
  const void* topk_weights = nullptr;  // [T, k], bf16 when weights_bf16 else fp32
  bool ids_int64 = false, weights_bf16 = false;
  void* out = nullptr;                 // bf16 [T, H]
  int T = 0, H = 0, I = 0, E = 0, k = 0;
  void* scratch = nullptr;             // scratch_bytes of device memory, any contents
  size_t scratch_bytes = 0;
  void* workspace = nullptr;           // workspace_bytes of device memory, its first workspace_zeroed_bytes zeroed
                                       // (left zeroed), or null when 0
  size_t workspace_bytes = 0;
  int32_t* error = nullptr;            // optional: int32[6] zeroed once, {set, kind, token, slot, id, E}
};

struct MoeLocalLayerSizes {
  size_t scratch_bytes = 0;    // routing arrays, the permuted rows (also L2's output) and L1's output
  size_t workspace_bytes = 0;  // the larger GEMM's split workspace (they run one after the other)
  size_t workspace_zeroed_bytes = 0;  // how much of its start must be zero (either GEMM's split counts)
  int route_blocks = 0;        // CTAs of the routing kernels
};

// Throws xstage::Error naming the first bad size: T >= 0, T * k below 2^31,
// 1 <= E <= 1024, 1 <= k <= min(E, 32), and H (L1's K, L2's N) and 2I (L1's
// N, L2's K: I) as the grouped GEMMs take them (moe.hpp).
void validate_moe_local_layer(const MoeLocalLayerArgs& a);
// Validates the sizes (pointers are not needed) and returns the buffers the layer needs.
MoeLocalLayerSizes moe_local_layer_sizes(const MoeLocalLayerArgs& a);
// Validates everything (pointers non-null and 16-byte aligned, buffers large
// enough) and launches on `stream`; T = 0 launches nothing.
void moe_local_layer(const MoeLocalLayerArgs& a, cudaStream_t stream);

// The record's words, as the kernels write them.
inline constexpr int kMoeRouteErrorWords = 6;
// "" when the record (a host copy of the int32[6]) is clear, else a sentence
// naming the token, slot and id, and what was expected.
std::string describe_moe_route_error(const int32_t* host_record);

}  // namespace xstage
