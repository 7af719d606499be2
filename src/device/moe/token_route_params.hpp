#pragma once
// The one-GPU MoE layer's routing kernels (every expert on this GPU; no
// other rank): plain parameter blocks and launches, shared by the .cu files
// and host C++ (no CUDA types beyond cudaStream_t). Data flow:
// docs/design/python.md, "The MoE layer on one GPU".
//
//   token_route_count    grid B: CTA b counts the valid (token, slot) pairs of
//                        its token range per expert -> block_counts[e][b]
//   token_route_scatter  grid B: every CTA scans block_counts (the same scan,
//                        redone: no grid-wide barrier, no ticket to reset),
//                        CTA 0 writes offs; each CTA places its pairs in
//                        expert order (a fixed order, no atomics), writes
//                        pos, row_weight, and copies its token rows into x_perm
//   (L1 + SwiGLU x row_weight, L2: the grouped GEMMs on x_perm, offs)
//   token_combine        a warp a token: out[t] = sum over j = 0 .. k-1 of
//                        y[pos[t k + j]] in fp32, in slot order, one bf16 rounding
//
// A pair whose id is out of range, or repeats an earlier slot's id of the
// same token, is routed nowhere (pos = -1: it adds nothing) and the first
// such pair is recorded in `error` (the host cannot see ids without a
// synchronisation; it reads the record when asked).
#include <cstdint>

#include <cuda_runtime_api.h>

namespace xstage::moe {

// At most this many experts (the scatter keeps a count an expert for each of
// its ranking warps in shared memory) and slots a token (the duplicate check
// compares a slot with every earlier one).
inline constexpr int kTokenRouteMaxExperts = 1024;
inline constexpr int kTokenRouteMaxTopk = 32;
// Token ranges: at most this many (each scatter CTA rescans B x E counts), and
// at least kTokenRouteMinTokens tokens each (fewer would leave CTAs with
// nothing to rank).
inline constexpr int kTokenRouteMaxBlocks = 128;
inline constexpr int kTokenRouteMinTokens = 8;
inline constexpr int token_route_blocks(int T) {
  const int b = (T + kTokenRouteMinTokens - 1) / kTokenRouteMinTokens;
  return b < 1 ? 1 : (b > kTokenRouteMaxBlocks ? kTokenRouteMaxBlocks : b);
}
// Tokens of block b: [b * per, min(T, (b + 1) * per)), per = ceil(T / B).
inline constexpr int token_route_per_block(int T, int blocks) { return (T + blocks - 1) / blocks; }

// The device's record of bad routing input: the first bad pair of a run.
// int32 words, zeroed by the caller; `set` goes 0 -> 1 once. `experts` is
// E, so that the record alone says what was expected.
struct TokenRouteError {
  int32_t set, kind, token, slot, id, experts;
};
enum TokenRouteErrorKind : int32_t { kTokenRouteIdOutOfRange = 1, kTokenRouteIdRepeated = 2 };

struct TokenRouteParams {
  const void* x = nullptr;             // bf16 [T, H]
  const void* topk_ids = nullptr;      // int32 or int64 [T, k]
  const void* topk_weights = nullptr;  // fp32 or bf16 [T, k]
  bool ids_int64 = false, weights_bf16 = false;
  int T = 0, H = 0, E = 0, k = 0, blocks = 1;
  int32_t* block_counts = nullptr;  // [E][blocks]
  int32_t* offs = nullptr;          // [E], cumulative row ends (the grouped GEMMs' offs)
  int32_t* pos = nullptr;           // [T * k]: the pair's row in expert order, or -1
  float* row_weight = nullptr;      // [T * k], by row
  void* x_perm = nullptr;           // bf16 [T * k, H], by row
  TokenRouteError* error = nullptr;  // optional
};

struct TokenCombineParams {
  const void* y = nullptr;      // bf16 [T * k, H], by row (L2's output)
  const int32_t* pos = nullptr;  // [T * k]
  void* out = nullptr;          // bf16 [T, H]
  int T = 0, H = 0, k = 0;
};

// Each returns a cudaError_t as an int (0 on success); arguments are
// validated by the caller (src/runtime/moe/moe_local_layer.cpp): H a multiple
// of 8, pointers 16-byte aligned, 1 <= E <= kTokenRouteMaxExperts, 1 <= k <=
// kTokenRouteMaxTopk, T >= 1.
int launch_token_route(const TokenRouteParams& p, cudaStream_t stream);  // count, then scatter
int launch_token_combine(const TokenCombineParams& p, cudaStream_t stream);

}  // namespace xstage::moe
