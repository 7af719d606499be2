#pragma once
// Tile shapes of the first (mma.sync, FlashAttention-2 structured) attention
// forward kernel. One CTA owns BLOCK_M query rows of one (batch, head); each
// of its WARPS warps owns 16 of those rows for the whole KV loop, so the
// softmax row statistics never leave the warp. K and V tiles of BLOCK_N rows
// are double-buffered in shared memory. Rows are padded by 8 elements (16 B)
// so that the 8 row addresses of an ldmatrix fall in 8 distinct bank quads.
#include <cstdint>

namespace xstage::attention {

template <int D_>
struct Sm90AttnFwdConfig {
  static_assert(D_ == 64 || D_ == 128, "sm90_bf16_attention_fwd: head dim must be 64 or 128");
  static constexpr int D = D_;
  static constexpr int WARPS = 8;
  static constexpr int THREADS = WARPS * 32;
  static constexpr int BLOCK_M = 16 * WARPS;  // 128 query rows per CTA
  static constexpr int BLOCK_N = 64;          // KV rows per mainloop step
  static constexpr int STAGES = 2;            // K/V double buffering
  static constexpr int SMEM_STRIDE = D + 8;   // elements per smem row (bank-conflict-free ldmatrix)
  // D=128 needs ~170 registers a thread (O: 64, Q fragments: 32, S: 32): one
  // CTA per SM. D=64 fits under 128: two CTAs per SM.
  static constexpr int MIN_BLOCKS = D == 64 ? 2 : 1;

  static constexpr int Q_ELEMS = BLOCK_M * SMEM_STRIDE;
  static constexpr int KV_ELEMS = BLOCK_N * SMEM_STRIDE;
  static constexpr size_t SMEM_BYTES = size_t(Q_ELEMS + 2 * STAGES * KV_ELEMS) * 2;

  static_assert(BLOCK_N % 16 == 0, "BLOCK_N must be a multiple of the MMA k/n step pair (16)");
  static_assert(D % 16 == 0, "D must be a multiple of the MMA k step (16)");
  static_assert((BLOCK_M * D / 8) % THREADS == 0, "Q tile must split evenly into 16-byte chunks per thread");
  static_assert((BLOCK_N * D / 8) % THREADS == 0, "K/V tile must split evenly into 16-byte chunks per thread");
  static_assert((SMEM_STRIDE * 2) % 16 == 0, "smem rows must stay 16-byte aligned for cp.async and ldmatrix");
  static_assert(SMEM_BYTES <= 227 * 1024, "tile does not fit in the 227 KiB of shared memory of an sm_90 CTA");
};

}  // namespace xstage::attention
