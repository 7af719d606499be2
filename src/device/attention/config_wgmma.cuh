#pragma once
// Tile shapes and shared-memory map of the warp-specialised wgmma attention
// forward kernel (sm90_attention_fwd_wgmma.cuh). One CTA = one tile = BLOCK_M
// query rows of one (batch, head), 1 + CONSUMER_WGS warpgroups:
//   warpgroup 0: producer (one thread issues every TMA load; the others idle),
//   warpgroups 1..CONSUMER_WGS: consumers, 64 query rows each (the wgmma M);
//   2 by default, 3 (BLOCK_M = 192) for head dim 64, where a warpgroup's GEMMs
//   are short next to its softmax and a third one keeps the tensor cores fed.
// Tiles in shared memory are stored as D/64 column blocks of [rows][64] bf16
// (128-byte rows, 128-byte swizzle), each block 1024-byte aligned: the layout
// the TMA unit writes and wgmma reads without any conversion.
#include <cstddef>
#include <cstdint>

namespace xstage::attention {

// How a consumer warpgroup orders its GEMMs and softmax (docs/design/attention.md):
//   basic:    S_j = Q K_j^T, wait, softmax, O += P_j V_j, wait;
//   overlap:  issue S_j and O += P_{j-1} V_{j-1} together, the softmax of S_j
//             runs while the second GEMM is in flight (FlashAttention-3's
//             intra-warpgroup overlap);
//   pingpong: overlap, and the two consumer warpgroups take turns issuing
//             their GEMMs (named barriers), so one's softmax hides behind the
//             other's GEMMs.
enum WgmmaSchedule : int { kWgmmaBasic = 0, kWgmmaOverlap = 1, kWgmmaPingpong = 2 };

// Keys per mainloop step when the caller does not choose.
template <int D>
inline constexpr int kWgmmaDefaultBlockN = 128;

template <int D_, int BLOCK_N_ = kWgmmaDefaultBlockN<D_>, int CONSUMER_WGS_ = 2>
struct Sm90WgmmaAttnConfig {
  static_assert(D_ == 64 || D_ == 128, "sm90_bf16_attention_fwd_wgmma: head dim must be 64 or 128");
  static_assert(CONSUMER_WGS_ == 2 || CONSUMER_WGS_ == 3, "sm90_bf16_attention_fwd_wgmma: 2 or 3 consumer warpgroups");
  static constexpr int D = D_;
  static constexpr int CONSUMER_WGS = CONSUMER_WGS_;
  static constexpr int CONSUMER_THREADS = CONSUMER_WGS * 128;
  static constexpr int CONSUMER_WARPS = CONSUMER_THREADS / 32;
  static constexpr int THREADS = 128 + CONSUMER_THREADS;  // 384 or 512
  static constexpr int BLOCK_M = 64 * CONSUMER_WGS;         // 128 or 192 query rows per CTA
  static constexpr int BLOCK_N = BLOCK_N_;                  // keys per mainloop step (the QK^T wgmma N)
  static constexpr int COL_BLOCKS = D / 64;                 // 128-byte column blocks of a row
  static constexpr int SMEM_STRIDE = D + 8;                 // elements per staged O row (16-byte aligned rows)
  static constexpr int MIN_BLOCKS = 1;
  // Register split (setmaxnreg): LAUNCH_REGS a thread at launch (65536 /
  // THREADS, rounded down to 8: 168 or 128); the producer gives
  // (LAUNCH_REGS - 24) * 128 back and the consumers take at most that:
  // 240 each for two consumer warpgroups, 160 for three.
  static constexpr int LAUNCH_REGS = (65536 / THREADS) / 8 * 8;
  static constexpr int PRODUCER_REGS = 24;
  static constexpr int CONSUMER_REGS = CONSUMER_WGS == 2 ? 240 : 160;
  // With a sender warp in the producer warpgroup (kProducerSends): 56 for
  // the producer and 224 for the consumers. At 24 the loader's KV loop and
  // the sender's send loop spilled ~300 bytes a thread; at 56 / 224 ptxas
  // reports 0 (paced-bulk) and 4 (paced-warp) bytes (perf-log f15).
  static constexpr int SENDING_PRODUCER_REGS = 56;
  static constexpr int SENDING_CONSUMER_REGS = CONSUMER_REGS - 32;

  static constexpr uint32_t Q_BYTES = uint32_t(BLOCK_M) * D * 2;
  static constexpr uint32_t KV_BYTES = uint32_t(BLOCK_N) * D * 2;  // one K or one V tile
  static constexpr uint32_t Q_BLOCK_BYTES = uint32_t(BLOCK_M) * 128;  // one column block of Q
  static constexpr uint32_t KV_BLOCK_BYTES = uint32_t(BLOCK_N) * 128;  // one column block of K or V
  static constexpr uint32_t O_STAGE_BYTES = uint32_t(BLOCK_M) * SMEM_STRIDE * 2;
  // K/V ring depth: as many stages (at most 4) as fit next to Q and the O staging rows.
  static constexpr int STAGES = [] {
    int s = 4;
    while (s > 2 && Q_BYTES + 2u * s * KV_BYTES + O_STAGE_BYTES + 2048 > 227u * 1024) --s;
    return s;
  }();

  // Offsets from the 1024-byte aligned base.
  static constexpr uint32_t OFF_Q = 0;
  static constexpr uint32_t OFF_K = OFF_Q + Q_BYTES;
  static constexpr uint32_t OFF_V = OFF_K + STAGES * KV_BYTES;
  static constexpr uint32_t OFF_O = OFF_V + STAGES * KV_BYTES;
  static constexpr uint32_t OFF_BAR = OFF_O + ((O_STAGE_BYTES + 127) / 128) * 128;
  // Barriers: the Q ring's full and empty, the K ring's full and empty per
  // stage, the V ring's, then the staged rows' hand-over to the producer
  // (o_full, o_empty), used when it sends them
  // (remote/epilogue_producer_paced.cuh).
  static constexpr int NUM_BARRIERS = 4 + 4 * STAGES;
  // The coordinates of the tile whose Q is loaded (the producer writes them
  // before q_full; the consumers read them after waiting on it).
  static constexpr uint32_t OFF_TILE = OFF_BAR + ((NUM_BARRIERS * 8 + 15) / 16) * 16;
  // The KV steps the loader has issued (read by a sender warp: remote/epilogue_producer_paced.cuh).
  static constexpr uint32_t OFF_PROGRESS = OFF_TILE + 16;
  static constexpr size_t SMEM_BYTES = size_t(OFF_PROGRESS) + 16 + 1024;  // + alignment slack

  // Named barriers: 0 is __syncthreads; 1 the consumers' epilogue; 2 + w the
  // ping-pong turn of consumer warpgroup w (turns go round 0, 1, .., 0).
  static constexpr int BAR_EPILOGUE = 1;
  static constexpr int BAR_PINGPONG = 2;

  static_assert(BLOCK_M % 16 == 0, "BLOCK_M must be a multiple of 16 (the epilogue stages 16 rows a warp)");
  static_assert(BLOCK_N % 16 == 0 && BLOCK_N <= 256, "BLOCK_N: a wgmma N and a TMA box height");
  static_assert(Q_BYTES % 1024 == 0 && KV_BYTES % 1024 == 0, "tiles must keep 1024-byte alignment");
  static_assert((SMEM_STRIDE * 2) % 16 == 0, "staged O rows must stay 16-byte aligned");
  static_assert(CONSUMER_THREADS * (CONSUMER_REGS - LAUNCH_REGS) <= 128 * (LAUNCH_REGS - PRODUCER_REGS),
                "the consumers cannot take more registers than the producer gives back");
  static_assert(CONSUMER_REGS % 8 == 0 && CONSUMER_REGS <= 256, "setmaxnreg takes multiples of 8 up to 256");
  static_assert(CONSUMER_THREADS * (SENDING_CONSUMER_REGS - LAUNCH_REGS) <=
                    128 * (LAUNCH_REGS - SENDING_PRODUCER_REGS),
                "with a sender, the consumers cannot take more registers than the producer gives back");
  static_assert(SMEM_BYTES <= 227 * 1024, "tile does not fit in the 227 KiB of shared memory of an sm_90 CTA");
};

}  // namespace xstage::attention
