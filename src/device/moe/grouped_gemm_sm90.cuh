#pragma once
// sm90_grouped_gemm: the MoE expert GEMM C_e = A_e B_e^T for every expert e
// in one persistent launch (moe_params.hpp has the layouts): the GEMM
// mainloop (gemm/mainloop_sm90.cuh), the grouped tile scheduler and an
// epilogue policy.
//   - warp specialisation: warpgroup 0 is the producer; one of its threads
//     walks the CTA's tiles and loads their k-blocks into the stage ring; it
//     gives its registers to the consumers (setmaxnreg);
//   - warpgroups 1 and 2 are consumers: each owns 64 x WG_TILE_N of the tile,
//     runs the mainloop's wgmma, then hands its accumulators to the epilogue
//     values (gemm/epilogue_values.cuh), which leave through warp-private
//     staging rows, the whole tile staged and sent row by row as TMA bulk
//     copies, or warp boxes sent as TMA tensor stores (the configuration's
//     OUT_COLS, WARP_TMA: gemm/epilogue_stores.cuh);
//   - the tile order is the scheduler policy's (sched/grouped.cuh); producer
//     and consumers walk it independently, reading the same offsets, so they
//     agree on every tile without a hand-over through shared memory;
//   - ragged experts: an m-block that runs past its expert's last row loads
//     the next expert's rows (or TMA zero fill past the tensor) and computes
//     them, but the epilogue stores rows < row_end only. The k tail (K not a
//     multiple of 64) is zero-filled by the TMA unit in both operands (the
//     maps' first dimension is K: columns K .. of the last k-block read as 0
//     in A and B, so they add 0 to every product).
//   - the n tail (N a multiple of 16, not of BLOCK_N): n_blocks = ceil(N /
//     BLOCK_N), and the last n-block of expert e loads B rows e N + N .. of
//     the 2-D map over all E N rows: the first rows of expert e + 1 (or zero
//     fill past the last expert). They make accumulator columns >= N, which
//     no store writes (each store leaves out columns >= n_out,
//     gemm/epilogue_stores.cuh), and a column < N reads only its own B row:
//     the stored values are those of expert e alone. SwiGLU pairs gate and up
//     columns inside 16-column groups starting at multiples of 16 of the
//     expert's rows; N a multiple of 16 puts every group wholly below N or
//     wholly above, so an output column < N / 2 never pairs with a row of
//     expert e + 1.
//   - ping-pong tiles (Cfg::PINGPONG, no split-K): consumer warpgroup c owns
//     the CTA's tiles c, c + 2, c + 4, ... of its walk, all their rows and
//     columns; its mainloop waits for its turn (the other warpgroup's
//     mainloop of the previous tile issued) and hands the turn on once its
//     own last wgmmas are issued, then runs its epilogue while the other
//     computes. The turns keep the stage ring's uses in walk order: when a
//     warpgroup waits for a stage, every earlier use of the ring has been
//     waited for (a wait one ring round ahead of the loads would pass on the
//     barrier's parity alone). pingpong_consumer below.
//   - split-K (p.splits > 1, for few tiles on long K): a work item is one
//     k range of a tile; its CTA writes the fp32 partial to the workspace and
//     counts itself in; the tile's last CTA sums every partial in split order
//     and runs the epilogue (split_reduce below). The tail split (p.tail_splits
//     > 1) does the same for the last wave's tiles only (sched/tail_split.hpp):
//     one producer warp counts the launch's tiles while the first ones run.
#include <cstdint>
#include <type_traits>

#include <cuda.h>

#include "device/gemm/epilogue_stores.cuh"
#include "device/gemm/mainloop_sm90.cuh"
#include "device/moe/moe_params.hpp"

namespace xstage::moe {

// The partials' sum in the tile's last CTA when the stage ring is idle (the
// CTA's last item: nothing more to load or compute): each partial (or half
// of one, where two do not fit the ring) comes into a ring buffer by one TMA
// bulk copy, up to kBufs in flight, and every thread adds its fragment from
// shared memory. Loads into registers leave ~10 in flight a thread (the
// accumulators hold most registers); the copies are not bound by them.
// Estimated ~2.5 us against ~1 us a 128 x 256 partial; the tail-split study
// measured no difference in whole GEMMs (docs/perf-log.md, M4). The sum per
// element is in split order, as the register path's: the same bits.
template <class Cfg, int NB>
struct StagedSum {
  static constexpr uint32_t kPartialBytes = NB * 256 * 16;
  static constexpr uint32_t kRingBytes = Cfg::STAGES * Cfg::STAGE_BYTES;
  static constexpr int kHalves = 2 * kPartialBytes <= kRingBytes ? 1 : 2;
  static constexpr int kChunkNb = NB / kHalves;
  static constexpr uint32_t kChunkBytes = kChunkNb * 256 * 16;
  static constexpr int kBufs = kRingBytes / kChunkBytes < 4 ? int(kRingBytes / kChunkBytes) : 4;
  static_assert(NB % kHalves == 0 && kBufs >= 2, "two chunks of a partial in flight at least");
};

template <class Cfg, int NB>
__device__ __forceinline__ void sum_partials_staged(float (&acc)[NB][4], const float4* all, int splits, int ct,
                                                    uint8_t* ring, uint64_t* bars) {
  using S = StagedSum<Cfg, NB>;
  const int chunks = splits * S::kHalves;
  auto issue = [&](int i) {  // chunk i: partial i / halves, n-blocks from (i % halves) * chunk_nb
    uint64_t* bar = bars + i % S::kBufs;
    ptx::mbar_arrive_expect_tx(bar, S::kChunkBytes);
    ptx::bulk_load_g2s(ring + (i % S::kBufs) * S::kChunkBytes,
                       all + (int64_t(i / S::kHalves) * NB + (i % S::kHalves) * S::kChunkNb) * 256, S::kChunkBytes,
                       bar);
  };
  if (ct == 0) {
    ptx::fence_proxy_async_global();  // the other CTAs' partials, acquired above, to the TMA unit's reads
    for (int i = 0; i < S::kBufs && i < chunks; ++i) issue(i);
  }
  // Chunk i into acc's n-blocks [h * chunk_nb, (h + 1) * chunk_nb) (h compile-time: acc stays in registers),
  // assigned for the first partial, added for the others.
  auto take = [&](int i, auto h_const, auto first) {
    constexpr int h = decltype(h_const)::value;
    ptx::mbar_wait(bars + i % S::kBufs, (i / S::kBufs) & 1);
    const float4* buf = reinterpret_cast<const float4*>(ring + (i % S::kBufs) * S::kChunkBytes) + ct;
#pragma unroll
    for (int j = 0; j < S::kChunkNb; ++j) {
      const float4 v = buf[j * 256];
      float* a = acc[h * S::kChunkNb + j];
      if constexpr (decltype(first)::value) {
        a[0] = v.x, a[1] = v.y, a[2] = v.z, a[3] = v.w;
      } else {
        a[0] += v.x, a[1] += v.y, a[2] += v.z, a[3] += v.w;
      }
    }
    ptx::named_bar_sync(1, 256);  // every thread has read the buffer before the next copy refills it
    if (ct == 0 && i + S::kBufs < chunks) issue(i + S::kBufs);
  };
  using First = std::true_type;
  using Then = std::false_type;
  take(0, std::integral_constant<int, 0>{}, First{});
  if constexpr (S::kHalves == 2) take(1, std::integral_constant<int, 1>{}, First{});
  for (int part = 1; part < splits; ++part) {
    take(part * S::kHalves, std::integral_constant<int, 0>{}, Then{});
    if constexpr (S::kHalves == 2) take(part * 2 + 1, std::integral_constant<int, 1>{}, Then{});
  }
}

// Split-K hand-over of one work item's accumulators. Every consumer thread
// writes its fragment (float4 per n-block, thread-fastest: 16-byte coalesced
// stores) to the tile's slot of partials, then thread 0 of the consumers
// counts the item in. Returns true in the tile's last item, with acc replaced
// by the sum of all partials read back in split order (its own too), so that
// the result does not depend on which CTA came last, and acc is dead between
// the stores and the sum (no second accumulator set: the 128x256 tile has no
// registers for one; keeping its own partial in registers through the count
// spilled 15 KB a thread). ring: the stage ring when it is idle (the CTA's
// last item), for sum_partials_staged; else null.
// The release/acquire pair is the fence-barrier-atomic pattern: each thread's
// fence orders its stores before the barrier, the atomic follows the barrier.
template <class Cfg, int NB>
__device__ __forceinline__ bool split_reduce(float (&acc)[NB][4], const GroupedGemmParams& p, int slot, int split,
                                             int splits, int ct, volatile int* flag, uint8_t* ring,
                                             uint64_t* bars) {
  constexpr int kTileFloats = NB * 4 * 256;  // 256 consumer threads
  float4* all = reinterpret_cast<float4*>(p.split_ws + int64_t(slot) * splits * kTileFloats);
  float4* mine = all + int64_t(split) * NB * 256;
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
    __stcg(mine + nb * 256 + ct, make_float4(acc[nb][0], acc[nb][1], acc[nb][2], acc[nb][3]));
  __threadfence();
  ptx::named_bar_sync(1, 256);
  if (ct == 0) {
    const int arrived = atomicAdd(p.split_count + slot, 1);
    const bool last = arrived == splits - 1;
    if (last) p.split_count[slot] = 0;  // every other item of the tile has counted itself in
    *flag = last;
  }
  ptx::named_bar_sync(1, 256);
  if (*flag == 0) return false;
  __threadfence();
  if (ring != nullptr) {
    sum_partials_staged<Cfg, NB>(acc, all, splits, ct, ring, bars);
    return true;
  }
  // One partial at a time, all its n-blocks' loads in flight together (the
  // first straight into acc): a loop over the splits inside each n-block
  // waited out one load latency a partial an n-block (~25 us for 2 splits
  // of a 128 x 256 tile; docs/perf-log.md, M4).
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
    const float4 v = __ldcg(all + nb * 256 + ct);
    acc[nb][0] = v.x, acc[nb][1] = v.y, acc[nb][2] = v.z, acc[nb][3] = v.w;
  }
  const float4* part = all + ct;
  for (int s = 1; s < splits; ++s) {
    part += NB * 256;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      const float4 v = __ldcg(part + nb * 256);
      acc[nb][0] += v.x, acc[nb][1] += v.y, acc[nb][2] += v.z, acc[nb][3] += v.w;
    }
  }
  return true;
}

// Named barriers of the ping-pong turns: warpgroup c waits on kTurnBar + c
// (1 is the cooperative epilogue's).
inline constexpr int kTurnBar = 2;

// The ping-pong consumer warpgroup cwg (0 or 1) over its tiles of the walk
// (grouped_gemm_sm90.cuh's header). `it` counts every tile's k-blocks, the
// other warpgroup's too, as the producer's count does.
template <class Cfg, class Epilogue, class Scheduler, class Mainloop>
__device__ __forceinline__ void pingpong_consumer(const GroupedGemmParams& p, const Scheduler& sched,
                                                  const Mainloop& mainloop, uint16_t* stage, int cwg, int k_blocks) {
  constexpr int BM = Cfg::BLOCK_M, BN = Cfg::BLOCK_N, H = Cfg::WG_HALVES;
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x & 31;
  const uint64_t a_desc0 = mainloop.a_desc(0), b_desc0 = mainloop.b_desc(0);
  constexpr int OB = BN / 8 / Epilogue::kOutDiv;  // output blocks of 8 columns a warp
  uint16_t* const c_out = static_cast<uint16_t*>(p.c);
  const int n_out = p.N / Epilogue::kOutDiv;
  float acc[H][BN / 8][4];
  uint32_t it = 0;
  int j = 0;  // the tile's place in the CTA's walk
  for (auto w = sched.first(); sched.valid(w); w = sched.next(w), ++j, it += k_blocks) {
    if ((j & 1) != cwg) continue;
    const auto c = sched.coord(w);
    if (j > 0) ptx::named_bar_sync(kTurnBar + cwg, 256);  // the previous tile's mainloop issued
    const bool hand_on = sched.valid(sched.next(w));      // the other warpgroup has a next tile
    uint32_t kit = it;
    mainloop.template mma_halves<BN, H>(kit, acc, a_desc0, b_desc0, 0, k_blocks, lane, [&] {
      if (hand_on) ptx::named_bar_arrive(kTurnBar + (cwg ^ 1), 256);
    });
    const int tile_row = c.row_begin + c.m_block * BM;
#pragma unroll
    for (int h = 0; h < H; ++h) {
      const int row = tile_row + h * 64 + warp * 16;
      if (H > 1 && tile_row + h * 64 >= c.row_end) break;  // the same in the warpgroup: rows of the next expert
      const auto out = Epilogue::template outputs<BN / 8>(p.row_weight, acc[h], row, c.row_end, lane);
      gemm::store_staged_clipped<OB>(stage, gemm::LocalRows{c_out, n_out}, row, c.row_end,
                                     c.n_block * BN / Epilogue::kOutDiv, n_out, lane, out);
    }
  }
}

// A as 2-D (K, rows_total), B as 2-D (K, E * N); boxes of 64 x BLOCK_M / BLOCK_N.
// C (WARP_TMA only) as 2-D (output columns, rows_total), boxes of 64 x 16: its
// tensor stores write no column >= n_out.
struct GroupedTmaMaps {
  CUtensorMap a, b, c;
};

// kSplitK: compiled apart, so that without it every k loop runs 0 .. k_blocks
// from the parameters alone: the compiler keeps the loop state in uniform
// registers. A k range derived from the tile walk (offsets read from memory)
// is not provably uniform: the loop state goes to per-thread registers, with
// 2 more moves per wgmma descriptor and a divergence guard around the loop,
// up to 17% slower on Qwen3-30B L1 (docs/perf-log.md, MoE 3b).
template <class Cfg, class Epilogue, class Scheduler, bool kSplitK>
__global__ void __launch_bounds__(Cfg::THREADS, 1)
    sm90_grouped_gemm(const GroupedGemmParams p, const typename Scheduler::Params sp,
                      const __grid_constant__ GroupedTmaMaps tm) {
  constexpr int BM = Cfg::BLOCK_M, BN = Cfg::BLOCK_N, WN = Cfg::WG_TILE_N;

  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const gemm::Sm90Mainloop<Cfg> mainloop(smem, reinterpret_cast<uint64_t*>(smem + Cfg::OFF_BAR));
  volatile int* split_flag = reinterpret_cast<volatile int*>(smem + Cfg::OFF_SPLIT_FLAG);
  static_assert(sizeof(typename Scheduler::SharedStorage) <= 16, "the scheduler's 16 bytes (tile_config.cuh)");
  auto* tail = reinterpret_cast<typename Scheduler::SharedStorage*>(smem + Cfg::OFF_SCHED);

  const int tid = threadIdx.x;
  // Without split-K the walk's split factors are the constant 1 (no division, no tail-split branch).
  typename Scheduler::Params sq = sp;
  if constexpr (!kSplitK) sq.splits = 1, sq.tail_splits = 1;
  const Scheduler sched(sq, BM, tail);
  uint64_t* reduce_bars = reinterpret_cast<uint64_t*>(smem + Cfg::OFF_REDUCE_BARS);
  if (tid == 0) {
    mainloop.init();
    if constexpr (kSplitK) {
      if (sched.tail_split()) ptx::mbar_init(&tail->ready, 1);
      for (int b = 0; b < StagedSum<Cfg, WN / 8>::kBufs; ++b) ptx::mbar_init(reduce_bars + b, 1);
    }
    ptx::mbar_fence_init();
  }
  __syncthreads();  // the last CTA-wide barrier: the roles split below

  const int k_blocks = (p.K + Cfg::BLOCK_K - 1) / Cfg::BLOCK_K;
  // Split s of n covers k-blocks [s * k_blocks / n, (s + 1) * k_blocks / n): at least one, as n <= k_blocks.
  auto kb_begin = [&](int split, int splits) { return split * k_blocks / splits; };

  if (tid < 128) {
    // ---------------- producer warpgroup
    ptx::setmaxnreg_dec<Cfg::PRODUCER_REGS>();
    // The warp as a warp-uniform value (lane 0's): ptxas then knows that the
    // producer thread and the count warp never share a warp, so the
    // producer's loop state stays in uniform registers. A role split on `tid`
    // alone lets a warp hold both paths as far as ptxas can tell, and it keeps
    // the loop state per-thread (4 R2UR a TMA load, a convergence barrier a
    // stage wait; grouped.cuh's layout() is the other half;
    // scripts/check_sass_loops.py checks the result).
    const int warp_u = __shfl_sync(0xffffffffu, tid / 32, 0);
    if (warp_u == 0) {
      if (tid == 0) {
        ptx::tma_prefetch_descriptor(&tm.a);
        ptx::tma_prefetch_descriptor(&tm.b);
        uint32_t it = 0;
        auto w = sched.first();
        for (; sched.valid(w); w = sched.next(w)) {  // whole tiles: the k range 0 .. k_blocks, fixed
          const auto c = sched.coord(w);
          if (kSplitK && c.splits > 1) break;
          mainloop.load(it, &tm.a, &tm.b, c.row_begin + c.m_block * BM, c.expert * p.N + c.n_block * BN, 0,
                        k_blocks);
        }
        if constexpr (kSplitK)
          for (; sched.valid(w); w = sched.next(w)) {
            const auto c = sched.coord(w);
            mainloop.load(it, &tm.a, &tm.b, c.row_begin + c.m_block * BM, c.expert * p.N + c.n_block * BN,
                          kb_begin(c.split, c.splits), kb_begin(c.split + 1, c.splits));
          }
      }
    } else if (kSplitK && sched.tail_split() && warp_u == 1) {
      sched.count_tiles(tid & 31);
    }
    return;
  }

  // ---------------- consumer warpgroups
  ptx::setmaxnreg_inc<Cfg::CONSUMER_REGS>();
  const int cwg = (tid - 128) / 128;
  uint16_t* stage = reinterpret_cast<uint16_t*>(smem + Cfg::OFF_STAGING) + ((tid - 128) / 32) * gemm::kStageWarpElems;
  if constexpr (Cfg::PINGPONG) {
    static_assert(!kSplitK, "ping-pong tiles run without split-K");
    pingpong_consumer<Cfg, Epilogue>(p, sched, mainloop, stage, cwg, k_blocks);
  } else {
    const int wg_m = Cfg::WG_M == 2 ? cwg : 0, wg_n = Cfg::WG_N == 2 ? cwg : 0;
    const int warp = (tid / 32) % 4, lane = tid & 31;
    uint8_t* out_tile = smem + Cfg::OFF_STAGING;  // BULK_OUT: the whole output tile
    const uint64_t a_desc0 = mainloop.a_desc(wg_m), b_desc0 = mainloop.b_desc(wg_n);

    float acc[WN / 8][4];
    uint32_t it = 0;
    uint32_t tma_groups = 0;  // WARP_TMA: the warp's box stores so far (store_warp_tma)
    if constexpr (Cfg::WARP_TMA)
      if (tid == 128) ptx::tma_prefetch_descriptor(&tm.c);
    // The epilogue of one tile, its accumulators in acc.
    auto store_tile = [&](const typename Scheduler::Coord& c) {
      const int tile_row = c.row_begin + c.m_block * BM;
      const int row = tile_row + wg_m * 64 + warp * 16;
      const auto out = Epilogue::template outputs<WN / 8>(p.row_weight, acc, row, c.row_end, lane);
      constexpr int OB = WN / 8 / Epilogue::kOutDiv;  // output blocks of 8 columns a warp
      uint16_t* const c_out = static_cast<uint16_t*>(p.c);
      const int n_out = p.N / Epilogue::kOutDiv;
      if constexpr (Cfg::WARP_TMA) {
        uint8_t* boxes = smem + Cfg::OFF_STAGING + ((tid - 128) / 32) * 2 * Cfg::TMA_BOX_BYTES;
        gemm::store_warp_tma<OB>(boxes, &tm.c, c_out, n_out, row, c.row_end,
                                 (c.n_block * BN + wg_n * WN) / Epilogue::kOutDiv, lane, tma_groups, out);
      } else if constexpr (Cfg::BULK_OUT) {
        static_assert(Cfg::OUT_COLS == BN / Epilogue::kOutDiv, "the staged tile holds the epilogue's columns");
        const int ct = tid - 128;
        // The previous tile's row copies must have read the staged tile before
        // anyone overwrites it: each sender waits for its own copy, the barrier
        // for every sender. (Long done by now: a mainloop ran in between.)
        if (ct < BM) ptx::bulk_wait_group_read_all();
        ptx::named_bar_sync(1, 256);
        gemm::stage_tile_rows<OB, Cfg::OUT_ROW_BYTES>(out_tile, wg_m * 64 + warp * 16, wg_n * WN / Epilogue::kOutDiv,
                                                      lane, out);
        // Generic-proxy writes to shared memory, read next by the TMA unit.
        ptx::fence_proxy_async_shared();
        ptx::named_bar_sync(1, 256);
        gemm::store_tile_bulk<BM, Cfg::OUT_COLS, Cfg::OUT_ROW_BYTES>(out_tile, gemm::LocalRows{c_out, n_out}, tile_row,
                                                                     c.row_end, c.n_block * Cfg::OUT_COLS, n_out, ct);
      } else {
        gemm::store_staged_clipped<OB>(stage, gemm::LocalRows{c_out, n_out}, row, c.row_end,
                                       (c.n_block * BN + wg_n * WN) / Epilogue::kOutDiv, n_out, lane, out);
      }
    };
    // Whole tiles first, with the plain kernel's k loop (0 .. k_blocks from the
    // parameters, so no per-item bounds in the common case); then the split
    // items (all of uniform split-K's, at most one a CTA of the tail split's)
    // in a loop of their own, as the producer walks them.
    auto w = sched.first();
    for (; sched.valid(w); w = sched.next(w)) {
      const auto c = sched.coord(w);
      if (kSplitK && c.splits > 1) break;
      mainloop.template mma<WN>(it, acc, a_desc0, b_desc0, 0, k_blocks, lane);
      store_tile(c);
    }
    if constexpr (kSplitK)
      for (; sched.valid(w); w = sched.next(w)) {
        const auto c = sched.coord(w);
        mainloop.template mma<WN>(it, acc, a_desc0, b_desc0, kb_begin(c.split, c.splits),
                                  kb_begin(c.split + 1, c.splits), lane);
        // The CTA's last item: the ring is idle, and the partials come through it.
        uint8_t* ring = sched.valid(sched.next(w)) ? nullptr : smem;
        if (split_reduce<Cfg, WN / 8>(acc, p, c.slot, c.split, c.splits, tid - 128, split_flag, ring, reduce_bars))
          store_tile(c);
      }
    // Shared memory must outlive the copies that read it; the writes are then
    // complete before the kernel's end makes them visible to the next launch.
    if constexpr (Cfg::BULK_OUT)
      if (tid - 128 < BM) ptx::bulk_wait_group_all();
    if constexpr (Cfg::WARP_TMA)
      if (lane == 0) ptx::bulk_wait_group_all();  // each warp's lane 0 issued its boxes' stores
  }
}

}  // namespace xstage::moe
