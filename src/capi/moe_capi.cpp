// A C entry point to the grouped GEMMs for bench/moe_vs_torch.py (ctypes):
// torch allocates the tensors and owns the stream, we launch into them, so
// our kernels and torch's run in one process, interleaved, on the same data.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include <cuda_runtime_api.h>

#include "xstage/core/error.hpp"
#include "xstage/moe/moe.hpp"

namespace {
void set_message(char* buf, int len, const char* what) {
  if (buf != nullptr && len > 0) std::snprintf(buf, size_t(len), "%s", what);
}
}  // namespace

extern "C" {

// kind: 0 L1 (SwiGLU, W13 interleaved), 1 L2; tile: -1 auto or a MoeTile value;
// splits: 0 auto, else the split-K factor; tail_splits: 0 auto, 1 none, else
// the tail split's cap (MoeGemmArgs); out_store: -1 auto or a MoeOutStore
// value. Returns 0, or 1 with the error message in err.
int xstage_moe_gemm(int kind, const void* a, const void* b, void* c, const int32_t* offs, const float* row_weight,
                    int rows_total, int K, int N, int E, int tile, int splits, int tail_splits, int out_store,
                    void* stream, char* err, int err_len) {
  try {
    if (kind != 0 && kind != 1) throw xstage::Error("moe gemm: kind: expected 0 (L1) or 1 (L2), got " + std::to_string(kind));
    xstage::MoeGemmArgs args{kind == 0 ? xstage::MoeGemmKind::l1_swiglu : xstage::MoeGemmKind::l2,
                             a, b, c, offs, row_weight, rows_total, K, N, E, xstage::MoeTile(tile), splits};
    args.out_store = xstage::MoeOutStore(out_store);
    args.tail_splits = tail_splits;
    xstage::moe_gemm(args, static_cast<cudaStream_t>(stream));
    return 0;
  } catch (const std::exception& e) {
    set_message(err, err_len, e.what());
    return 1;
  }
}

// The tile the heuristic picks (a MoeTile value) for kind (0 L1, 1 L2) and
// out_store (as in xstage_moe_gemm), as moe_gemm resolves it.
// A kind other than 0 or 1 gives -2.
int xstage_moe_pick_tile(int kind, int out_store, int rows_total, int E, int N, int K, int sm_count) {
  if (kind != 0 && kind != 1) return -2;
  const auto k = kind == 0 ? xstage::MoeGemmKind::l1_swiglu : xstage::MoeGemmKind::l2;
  return int(xstage::moe_pick_tile(rows_total, E, N, K, sm_count,
                                   xstage::moe_narrow_tile_built(k, xstage::MoeOutStore(out_store))));
}

// The split-K factor the heuristic picks for that tile.
int xstage_moe_pick_splits(int rows_total, int E, int N, int K, int tile, int sm_count) {
  return xstage::moe_pick_splits(rows_total, E, N, K, xstage::MoeTile(tile), sm_count);
}

// The tail split's cap the heuristic picks for that tile (1: none).
int xstage_moe_pick_tail_splits(int rows_total, int E, int N, int K, int tile, int sm_count) {
  return xstage::moe_pick_tail_splits(rows_total, E, N, K, xstage::MoeTile(tile), sm_count);
}
}
