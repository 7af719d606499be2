#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>

#include <fmt/format.h>

#include "device/moe/grouped_gemm_launch.hpp"
#include "runtime/moe/moe_device_ids.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/moe/moe.hpp"

namespace xstage {

namespace {
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Split-K partials beyond this size are refused: splits pay off only when few
// tiles leave SMs idle, where the workspace is a few MiB.
constexpr int64_t kMaxSplitWorkspaceBytes = int64_t(1) << 30;

// As sched/grouped.cuh's max_tiles, n-blocks rounded up (the last one of an N
// that is no multiple of the tile width is partial, and counts as a tile).
int64_t max_tiles(const MoeGemmArgs& a, int bm, int bn) {
  return (int64_t(a.rows_total) / bm + a.E) * ((int64_t(a.N) + bn - 1) / bn);
}

// The split-K workspace of each device (partials and per-tile counts, see
// moe_params.hpp), grown when a launch needs more; freed at exit by the driver.
struct SplitWorkspace {
  float* ws = nullptr;
  int32_t* count = nullptr;
  int64_t ws_bytes = 0, tiles = 0;
};

void reserve_split_workspace(SplitWorkspace& w, int64_t ws_bytes, int64_t tiles) {
  ws_bytes = std::max<int64_t>(ws_bytes, 16), tiles = std::max<int64_t>(tiles, 1);
  if (ws_bytes > w.ws_bytes) {
    if (w.ws != nullptr) XSTAGE_CUDA(cudaFree(w.ws));  // synchronises: no launch still reads it
    w.ws = nullptr, w.ws_bytes = 0;
    XSTAGE_CUDA(cudaMalloc(&w.ws, size_t(ws_bytes)));
    w.ws_bytes = ws_bytes;
  }
  if (tiles > w.tiles) {
    if (w.count != nullptr) XSTAGE_CUDA(cudaFree(w.count));
    w.count = nullptr, w.tiles = 0;
    XSTAGE_CUDA(cudaMalloc(&w.count, size_t(tiles) * sizeof(int32_t)));
    XSTAGE_CUDA(cudaMemset(w.count, 0, size_t(tiles) * sizeof(int32_t)));  // each launch leaves them at 0
    w.tiles = tiles;
  }
}

// The split workspace: one arrival count a tile that may split, then the
// partials (fp32, BLOCK_M x BLOCK_N a split) 256 bytes on. Uniform split-K:
// every tile that may exist, `splits` partials each. Tail split: one grid's
// partials and counts (moe_params.hpp), the grid as the launch sizes it.
struct SplitSizes {
  int64_t counts = 0, partial_bytes = 0;
  int64_t count_bytes() const { return counts * int64_t(sizeof(int32_t)); }
  int64_t partials_offset() const { return (count_bytes() + 255) / 256 * 256; }
  int64_t total() const { return partials_offset() + partial_bytes; }
};
SplitSizes split_sizes(const MoeGemmArgs& a, MoeTile t, int splits, int tail_splits, int sms) {
  const int bm = moe_tile_block_m(t), bn = moe_tile_block_n(t);
  const int64_t tiles = max_tiles(a, bm, bn);
  const int64_t tile_bytes = int64_t(bm) * bn * int64_t(sizeof(float));
  if (splits > 1) return {tiles, tiles * splits * tile_bytes};
  if (tail_splits > 1) {
    const int64_t grid = std::min<int64_t>(tiles, sms);
    return {grid, grid * tile_bytes};
  }
  return {};
}

// The current device's SM count, read once a device: the heuristic's input
// on every launch (the attribute query is not free), per device because a
// process may drive GPUs of different sizes (or MIG slices).
int device_sms() {
  static std::atomic<int> sms[64] = {};
  int dev = 0;
  XSTAGE_CUDA(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 64) throw Error(fmt::format("moe gemm: device {}; expected one of the first 64, those this library sizes for", dev));
  int n = sms[dev].load(std::memory_order_relaxed);
  if (n == 0) {
    XSTAGE_CUDA(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    sms[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}
const char* kind_name(MoeGemmKind k) { return k == MoeGemmKind::l1_swiglu ? "L1" : "L2"; }
}  // namespace

MoeTile parse_moe_tile(const std::string& name) {
  if (name == "auto") return MoeTile::automatic;
  if (name == "m128n256") return MoeTile::m128n256;
  if (name == "m64n256") return MoeTile::m64n256;
  if (name == "m128n128") return MoeTile::m128n128;
  if (name == "m64n80") return MoeTile::m64n80;
  if (name == "m128n128pp") return MoeTile::m128n128pp;
  throw Error(fmt::format("--tile {}: expected auto, m128n256, m64n256, m128n128, m64n80 or m128n128pp", name));
}

std::string to_string(MoeTile t) {
  switch (t) {
    case MoeTile::automatic: return "auto";
    case MoeTile::m128n256: return "m128n256";
    case MoeTile::m64n256: return "m64n256";
    case MoeTile::m128n128: return "m128n128";
    case MoeTile::m64n80: return "m64n80";
    case MoeTile::m128n128pp: return "m128n128pp";
  }
  return "unknown";
}

MoeOutStore parse_moe_out_store(const std::string& name) {
  if (name == "auto") return MoeOutStore::automatic;
  if (name == "staged") return MoeOutStore::warp_staged;
  if (name == "bulk") return MoeOutStore::tile_bulk;
  if (name == "tma") return MoeOutStore::warp_tma;
  throw Error(fmt::format("--out-store {}: expected auto, staged, bulk or tma", name));
}

std::string to_string(MoeOutStore s) {
  switch (s) {
    case MoeOutStore::automatic: return "auto";
    case MoeOutStore::warp_staged: return "staged";
    case MoeOutStore::tile_bulk: return "bulk";
    case MoeOutStore::warp_tma: return "tma";
  }
  return "unknown";
}

int moe_tile_block_m(MoeTile t) { return moe::grouped_gemm_tile_shape(tile_id(t)).block_m; }
int moe_tile_block_n(MoeTile t) { return moe::grouped_gemm_tile_shape(tile_id(t)).block_n; }

void validate_moe_gemm_args(const MoeGemmArgs& a) {
  const char* k = kind_name(a.kind);
  if (a.E < 1) throw Error(fmt::format("moe gemm {}: E (experts): expected >= 1, got {}", k, a.E));
  if (a.K < 8 || a.K % 8 != 0)
    throw Error(fmt::format("moe gemm {}: K: expected a positive multiple of 8 (16-byte rows for the TMA unit), got {}",
                            k, a.K));
  // torch._grouped_mm's shapes: 16-byte rows of A and B (K), 16-byte output
  // rows, and for L1 whole 16-row gate/up groups of the interleaved W13 (N).
  // The tiles' columns past N are computed and left out of the stores.
  if (a.N < 16 || a.N % 16 != 0)
    throw Error(fmt::format("moe gemm {}: N{}: expected a positive multiple of 16, got {}", k,
                            a.kind == MoeGemmKind::l1_swiglu ? " (2I, gate and up interleaved in groups of 8)" : "",
                            a.N));
  if (a.rows_total < 0) throw Error(fmt::format("moe gemm {}: rows_total: expected >= 0, got {}", k, a.rows_total));
  if (a.kind != MoeGemmKind::l1_swiglu && a.row_weight != nullptr)
    throw Error(fmt::format("moe gemm {}: row_weight: expected none (the routing weight belongs to L1's epilogue)", k));
  if (int64_t(a.E) * a.N > INT32_MAX)
    throw Error(fmt::format("moe gemm {}: E * N = {}: expected below 2^31 (B's rows are indexed in 32 bits)", k,
                            int64_t(a.E) * a.N));
  if (int64_t(a.rows_total) * a.N > (int64_t(1) << 40))
    throw Error(fmt::format("moe gemm {}: rows * N = {}: expected at most 2^40 (the output's elements)", k,
                            int64_t(a.rows_total) * a.N));
  const std::pair<const void*, const char*> ptrs[] = {{a.a, "a"}, {a.b, "b"}, {a.c, "c"}, {a.offs, "offs"}};
  for (const auto& [p, name] : ptrs) {
    if (p == nullptr && (a.rows_total > 0 || std::string(name) == "offs"))
      throw Error(fmt::format("moe gemm {}: {}: expected a device pointer, got null", k, name));
    if (!aligned16(p)) throw Error(fmt::format("moe gemm {}: {}: expected 16-byte alignment, got {}", k, name, p));
  }
  if (a.splits < 0 || a.splits > (a.K + 63) / 64)
    throw Error(fmt::format("moe gemm {}: splits: expected 0 (automatic) to ceil(K / 64) = {}, got {}", k,
                            (a.K + 63) / 64, a.splits));
  if (a.tail_splits < 0 || a.tail_splits > (a.K + 63) / 64)
    throw Error(fmt::format("moe gemm {}: tail_splits: expected 0 (automatic) to ceil(K / 64) = {}, got {}", k,
                            (a.K + 63) / 64, a.tail_splits));
  if (a.tail_splits > 1 && a.splits > 1)
    throw Error(fmt::format("moe gemm {}: tail_splits {} with splits {}: every tile already splits; expected "
                            "tail_splits 0 or 1, or splits 0 or 1",
                            k, a.tail_splits, a.splits));
  if (a.out_store != MoeOutStore::automatic && a.out_store != MoeOutStore::warp_staged &&
      a.out_store != MoeOutStore::tile_bulk && a.out_store != MoeOutStore::warp_tma)
    throw Error(fmt::format("moe gemm {}: out_store {}: expected -1 (auto), 0 (staged), 1 (bulk) or 2 (tma)", k,
                            int(a.out_store)));
  if (a.workspace != nullptr && !aligned16(a.workspace))
    throw Error(fmt::format("moe gemm {}: workspace: expected 16-byte alignment, got {}", k, a.workspace));
  if (a.tile != MoeTile::automatic) {
    if (moe_tile_block_n(a.tile) == 0)
      throw Error(fmt::format("moe gemm {}: tile {}: unknown; expected a tile of MoeTile", k, int(a.tile)));
    if (a.tile == MoeTile::m64n80 && a.kind != MoeGemmKind::l2)
      throw Error(fmt::format("moe gemm {}: tile m64n80: built for L2 only (its 40-column warpgroup halves split "
                              "SwiGLU's 16-column gate/up groups); expected auto, m128n256, m64n256 or m128n128",
                              k));
    if (a.tile == MoeTile::m64n80 && a.out_store != MoeOutStore::automatic &&
        a.out_store != MoeOutStore::warp_staged)
      throw Error(fmt::format("moe gemm {}: tile m64n80 with out_store {}: built with the staged store only; "
                              "expected auto or staged",
                              k, to_string(a.out_store)));
    if (a.tile == MoeTile::m128n128pp && a.out_store != MoeOutStore::automatic &&
        a.out_store != MoeOutStore::warp_staged)
      throw Error(fmt::format("moe gemm {}: tile m128n128pp with out_store {}: built with the staged store only; "
                              "expected auto or staged",
                              k, to_string(a.out_store)));
    if (a.tile == MoeTile::m128n128pp && a.splits > 1)
      throw Error(fmt::format("moe gemm {}: tile m128n128pp with {} splits: built without split-K; expected splits "
                              "0 (automatic) or 1",
                              k, a.splits));
    if (a.tile == MoeTile::m128n128pp && a.tail_splits > 1)
      throw Error(fmt::format("moe gemm {}: tile m128n128pp with tail_splits {}: built without split-K; expected "
                              "tail_splits 0 (automatic) or 1",
                              k, a.tail_splits));
  }
}

MoeTile moe_resolved_tile(const MoeGemmArgs& a) {
  if (a.tile != MoeTile::automatic) return a.tile;
  return moe_pick_tile(a.rows_total, a.E, a.N, a.K, device_sms(), moe_narrow_tile_built(a.kind, a.out_store));
}

namespace {
// The splits for the arguments' resolved tile t (resolved once by the caller).
int splits_for(const MoeGemmArgs& a, MoeTile t) {
  if (a.splits > 0) return a.splits;
  if (a.tail_splits > 1) return 1;  // a tail split asked for: whole tiles before the tail
  return moe_pick_splits(a.rows_total, a.E, a.N, a.K, t, device_sms());
}
// The tail split's cap for tile t and its resolved splits.
int tail_splits_for(const MoeGemmArgs& a, MoeTile t, int splits) {
  if (splits > 1) return 1;
  if (a.tail_splits > 0) return a.tail_splits;
  if (a.splits > 0) return 1;  // splits 1 asked for: whole tiles only
  return moe_pick_tail_splits(a.rows_total, a.E, a.N, a.K, t, device_sms());
}
SplitSizes split_sizes_for(const MoeGemmArgs& a) {
  const MoeTile t = moe_resolved_tile(a);
  const int splits = splits_for(a, t);
  if (a.rows_total == 0) return {};
  const int tail = tail_splits_for(a, t, splits);
  return split_sizes(a, t, splits, tail, tail > 1 ? device_sms() : 0);  // the SMs size the tail's grid only
}
}  // namespace

int moe_resolved_splits(const MoeGemmArgs& a) { return splits_for(a, moe_resolved_tile(a)); }

int moe_resolved_tail_splits(const MoeGemmArgs& a) {
  const MoeTile t = moe_resolved_tile(a);
  return tail_splits_for(a, t, splits_for(a, t));
}

MoeOutStore moe_resolved_out_store(const MoeGemmArgs& a) {
  return a.out_store != MoeOutStore::automatic ? a.out_store : moe_pick_out_store(a.kind, moe_resolved_tile(a));
}

size_t moe_workspace_bytes(const MoeGemmArgs& a) {
  validate_moe_gemm_args(a);
  return size_t(split_sizes_for(a).total());
}

size_t moe_workspace_zeroed_bytes(const MoeGemmArgs& a) {
  validate_moe_gemm_args(a);
  return size_t(split_sizes_for(a).count_bytes());
}

void moe_gemm(const MoeGemmArgs& a, cudaStream_t stream) {
  validate_moe_gemm_args(a);
  moe::GroupedGemmParams p;
  p.a = a.a, p.b = a.b, p.c = a.c, p.offs = a.offs, p.row_weight = a.row_weight;
  p.rows_total = a.rows_total, p.K = a.K, p.N = a.N, p.E = a.E;
  const MoeTile t = moe_resolved_tile(a);
  const moe::TileId tile = tile_id(t);
  p.splits = splits_for(a, t);
  p.tail_splits = tail_splits_for(a, t, p.splits);
  if ((p.splits > 1 || p.tail_splits > 1) && a.rows_total > 0) {
    const SplitSizes z = split_sizes(a, t, p.splits, p.tail_splits, device_sms());
    if (z.partial_bytes > kMaxSplitWorkspaceBytes)
      throw Error(fmt::format("moe gemm {}: splits {}: the partials of up to {} tiles take {} MiB; expected at most {} MiB "
                              "(split-K is for few tiles)",
                              kind_name(a.kind), p.splits, z.counts, z.partial_bytes >> 20,
                              kMaxSplitWorkspaceBytes >> 20));
    if (a.workspace != nullptr) {
      const int64_t at = std::max<int64_t>(z.partials_offset(), int64_t(a.workspace_partials_at));
      if (at % 16 != 0)
        throw Error(fmt::format("moe gemm {}: workspace_partials_at {}: expected a multiple of 16", kind_name(a.kind),
                                a.workspace_partials_at));
      if (a.workspace_bytes < size_t(at + z.partial_bytes))
        throw Error(fmt::format("moe gemm {}: workspace: {} bytes given, expected at least {} (moe_workspace_bytes{})",
                                kind_name(a.kind), a.workspace_bytes, at + z.partial_bytes,
                                a.workspace_partials_at > 0 ? ", with the partials at workspace_partials_at" : ""));
      p.split_count = static_cast<int32_t*>(a.workspace);
      p.split_ws = reinterpret_cast<float*>(static_cast<char*>(a.workspace) + at);
    } else {
      static std::mutex mu;
      static SplitWorkspace per_device[64];
      int dev = 0;
      XSTAGE_CUDA(cudaGetDevice(&dev));
      if (dev < 0 || dev >= 64) throw Error(fmt::format("moe gemm: device {}; expected one of the first 64, those with a workspace", dev));
      std::lock_guard<std::mutex> lock(mu);
      reserve_split_workspace(per_device[dev], z.partial_bytes, z.counts);
      p.split_ws = per_device[dev].ws, p.split_count = per_device[dev].count;
    }
  }
  const moe::OutStoreId out = out_store_id(moe_resolved_out_store(a));
  const int rc = a.kind == MoeGemmKind::l1_swiglu ? moe::launch_grouped_gemm_swiglu(p, tile, out, stream)
                                                  : moe::launch_grouped_gemm_plain(p, tile, out, stream);
  XSTAGE_CUDA(rc);
}

}  // namespace xstage
