#pragma once
// MoE expert compute on the GPU: the two grouped GEMMs of an expert layer
// (kernel: src/device/moe/), bf16 in and out, fp32 accumulation.
//   L1: H[rows of e] = SwiGLU(X[rows of e] W13[e]^T) (times each row's routing
//       weight when given): W13[e] is [2I, K] with gate and up rows
//       interleaved in groups of 8 (moe_interleave_w13), H is [rows, I];
//   L2: Y[rows of e] = H[rows of e] W2[e]^T, W2[e] [N, I].
// The rows of expert e are offs[e-1] .. offs[e] (offs[-1] = 0), offs a device
// int32 array of cumulative ends as torch._grouped_mm takes; any count works,
// 0 included. Requirements (checked before launch, naming the argument), the
// shapes torch._grouped_mm takes: E >= 1; K a positive multiple of 8; N a
// positive multiple of 16 (L1: N = 2I, so I a multiple of 8), whatever the
// tile (the last n-block of an N that is no multiple of the tile width is
// partial); device pointers 16-byte aligned; rows_total >= 0. The offsets
// are not read by the host: values outside [previous end, rows_total] make
// empty experts.
#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

namespace xstage {

enum class MoeGemmKind : int { l1_swiglu = 0, l2 = 1 };

// Tile shape, BLOCK_M x BLOCK_N (src/device/moe/moe_params.hpp's TileId values).
// m64n80 is built for L2 with the staged store only (few long experts on a
// narrow N, e.g. HiDream-I1's 2 experts of N = 2560). m128n128pp: 128 x 128
// tiles, each consumer warpgroup on tiles of its own, one's epilogue beside
// the other's mainloop (ping-pong, for short K); staged store, no split-K.
enum class MoeTile : int { automatic = -1, m128n256 = 0, m64n256 = 1, m128n128 = 2, m64n80 = 3, m128n128pp = 4 };
// "auto", "m128n256", "m64n256", "m128n128", "m64n80", "m128n128pp"; throws xstage::Error otherwise.
MoeTile parse_moe_tile(const std::string& name);
std::string to_string(MoeTile t);
int moe_tile_block_m(MoeTile t);
int moe_tile_block_n(MoeTile t);

// How the epilogue's output tile leaves shared memory (src/device/moe/
// epilogue_store.cuh): 16-byte stores from warp-private staging rows; the
// whole tile staged and sent as one TMA bulk copy a row, so that the
// consumers return to the next tile's mainloop at once; or each warp's
// 16 x 64 boxes staged in two small buffers and sent as TMA tensor stores
// (asynchronous as bulk, without its tile of shared memory).
enum class MoeOutStore : int { automatic = -1, warp_staged = 0, tile_bulk = 1, warp_tma = 2 };
// "auto", "staged", "bulk", "tma"; throws xstage::Error otherwise.
MoeOutStore parse_moe_out_store(const std::string& name);
std::string to_string(MoeOutStore s);
// The automatic choice for a resolved tile: tma for L2 on 128 x 256 tiles,
// staged otherwise (docs/design/moe.md; bulk measured slower, perf-log MoE 5;
// tma 1.008x of staged on L2's 128 x 256 tiles, slower on 128 x 128 ones,
// MoE 10 and 11).
MoeOutStore moe_pick_out_store(MoeGemmKind kind, MoeTile tile);

struct MoeGemmArgs {
  MoeGemmKind kind = MoeGemmKind::l2;
  const void* a = nullptr;            // bf16 [rows_total, K]
  const void* b = nullptr;            // bf16 [E, N, K] (L1: N = 2I, interleaved)
  void* c = nullptr;                  // bf16 [rows_total, N] (L2) or [rows_total, N / 2] (L1)
  const int32_t* offs = nullptr;      // device int32 [E], cumulative row ends
  const float* row_weight = nullptr;  // L1 only, optional: fp32 [rows_total]
  int rows_total = 0, K = 0, N = 0, E = 0;
  MoeTile tile = MoeTile::automatic;
  // Split-K: 0 = the heuristic's (moe_pick_splits), else 1 .. ceil(K / 64).
  // With more than 1 the launch needs a workspace of moe_workspace_bytes():
  // the caller's (its counts zeroed once before its first use; every launch
  // leaves them ready for the next; one launch at a time may use it), or, when
  // `workspace` is null, one of this device shared by every such launch,
  // which the first launch of a size allocates (so not inside a CUDA graph
  // capture; launch them on one stream).
  // 1: every tile sums its whole K in one CTA (no tail split either, unless
  // tail_splits asks for one).
  int splits = 0;
  // Tail split (src/device/sched/tail_split.hpp): the last wave of tiles, when
  // it would leave at least half the SMs idle, splits its tiles' k-blocks over
  // them. 0: the heuristic's (moe_pick_tail_splits) where `splits` is 0 and
  // resolves to 1, else none; 1: none; 2 .. ceil(K / 64): at most this many
  // ways (splits 0 or 1). Its workspace: one grid of partials.
  int tail_splits = 0;
  MoeOutStore out_store = MoeOutStore::automatic;
  // 16-byte aligned, workspace_bytes long, or null. Its first
  // moe_workspace_zeroed_bytes() bytes (the split counts) must be zero before
  // a launch; each launch leaves them so. The rest (fp32 partials) need not be.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // Where in the workspace the partials start, at least: 0 = just past this
  // launch's counts (256-byte aligned). GEMMs that share one workspace (one
  // after the other) put them past the largest count area of any of them, so
  // that one's partials never overwrite another's counts.
  size_t workspace_partials_at = 0;
};

// The split workspace these arguments need (0 when no tile splits), and how
// much of its start must be zeroed before a launch (the counts).
size_t moe_workspace_bytes(const MoeGemmArgs& a);
size_t moe_workspace_zeroed_bytes(const MoeGemmArgs& a);

// The tile and split heuristic (docs/design/moe.md), from the host's sizes
// only (rows_total / E rows an expert; the offsets stay on the device).
// Where the 128 x 256 tiles fill more than half the SMs: up to 64 rows an
// expert the 64 x 256 tile (when its 256 columns pad N no more than 128
// would); else, for each wide compiled shape, the expected tiles (n-blocks
// rounded up), the waves of `sm_count` CTAs they take, and a cost per tile of
// BLOCK_M * BLOCK_N + 64 * (BLOCK_M + BLOCK_N); the cheapest wins, ties to the
// larger tile; no split; but 128 x 128 where the 128 x 256 tiles would fill
// one wave at the mean (more than half the SMs, at most all) on more than one
// expert of more than 64 rows: skewed counts, which the host cannot see,
// would spill them into a second. Where they fill at most half (few tiles): tile and
// split-K together, the cheapest by a cost model fitted to a split study of
// every tile and split forced (bench/fit_moe_split_rule.py), over every tile
// built for the GEMM (m64n80 only where `narrow`: L2 with the staged store)
// and 1 to kMoeMaxSplits splits, at 0.7 of its cost at the mean rows plus
// 0.3 of it with one more m-block an expert (skewed counts).
MoeTile moe_pick_tile(int rows_total, int E, int N, int K, int sm_count, bool narrow = false);
// Whether m64n80 is built for this GEMM and output store (`narrow` above).
inline bool moe_narrow_tile_built(MoeGemmKind kind, MoeOutStore store) {
  return kind == MoeGemmKind::l2 && (store == MoeOutStore::automatic || store == MoeOutStore::warp_staged);
}
// Split-K for `tile`: 1 unless few tiles (above); then the cheapest allowed
// factor for that tile by the same cost model.
inline constexpr int kMoeMaxSplits = 4;
int moe_pick_splits(int rows_total, int E, int N, int K, MoeTile tile, int sm_count);
// The tail split's cap for `tile` where split-K is not picked (more than few
// tiles): 1 (none) for the ping-pong tile and where K is too short for a
// split to repay its partials' round trip, else the ways a tail tile may
// split at most, from the k-blocks (docs/design/moe.md). The kernel splits
// only a tail of at most half the grid, by at most grid / tail tiles.
int moe_pick_tail_splits(int rows_total, int E, int N, int K, MoeTile tile, int sm_count);

// Throws xstage::Error naming the first bad field.
void validate_moe_gemm_args(const MoeGemmArgs& a);
// Validates, resolves the tile, launches on `stream` (asynchronous).
void moe_gemm(const MoeGemmArgs& a, cudaStream_t stream = nullptr);
// The tile, splits and output store moe_gemm runs for these arguments on the current device.
MoeTile moe_resolved_tile(const MoeGemmArgs& a);
int moe_resolved_splits(const MoeGemmArgs& a);
int moe_resolved_tail_splits(const MoeGemmArgs& a);
MoeOutStore moe_resolved_out_store(const MoeGemmArgs& a);

// W13 from the usual [E, 2I, K] layout (gate rows 0 .. I-1, then up rows) to
// the interleaved one, on the host (I a multiple of 8).
void moe_interleave_w13(const uint16_t* src, uint16_t* dst, int E, int I, int K);
// Row r of the interleaved W13 of one expert: the row of the usual layout it holds.
inline int moe_w13_source_row(int r, int I) {
  const int j = r / 16, q = r % 16;
  return q < 8 ? 8 * j + q : I + 8 * j + (q - 8);
}

// ---- CPU reference (fp64 accumulation over bf16 values as float)
// out[n] = sum_k a[k] * b[n * K + k] for n < N.
void moe_reference_row(const float* a, const float* b, int K, int N, double* out);
// SwiGLU of one L1 row computed on the interleaved W13 (N = 2I columns in,
// I out), times `weight`.
void moe_reference_swiglu(const double* gate_up_interleaved, int I, double weight, double* out);

}  // namespace xstage
