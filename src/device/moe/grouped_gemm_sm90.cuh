#pragma once
// sm90_bf16_grouped_gemm: the MoE expert GEMM C_e = A_e B_e^T for every
// expert e in one persistent launch (moe_params.hpp has the layouts).
//   - warp specialisation: warpgroup 0 is the producer; one of its threads
//     walks the CTA's tiles and issues TMA loads of the A and B k-blocks
//     (64 columns, 128-byte swizzled) into a ring of STAGES slots, each with
//     a full barrier (the copy's bytes) and an empty barrier (one arrival per
//     consumer warp); it gives its registers to the consumers (setmaxnreg);
//   - warpgroups 1 and 2 are consumers: each owns 64 x WG_TILE_N of the tile
//     and runs wgmma with both operands K-major in shared memory, one k-block
//     group in flight while it waits for the next, then hands its
//     accumulators to the epilogue policy (epilogue_store.cuh), which stores
//     them through warp-private staging rows;
//   - the tile order is the scheduler policy's (sched/grouped.cuh); producer
//     and consumers walk it independently, reading the same offsets, so they
//     agree on every tile without a hand-over through shared memory;
//   - ragged experts: an m-block that runs past its expert's last row loads
//     the next expert's rows (or TMA zero fill past the tensor) and computes
//     them, but the epilogue stores rows < row_end only. The k tail (K not a
//     multiple of 64) is zero-filled by the TMA unit in both operands.
#include <cstdint>

#include <cuda.h>

#include "device/moe/epilogue_store.cuh"
#include "device/moe/grouped_gemm_config.cuh"
#include "device/moe/moe_params.hpp"
#include "device/ptx/mbarrier.cuh"
#include "device/ptx/tma.cuh"
#include "device/ptx/wgmma.cuh"

namespace xstage::moe {

// A as 2-D (K, rows_total), B as 2-D (K, E * N); boxes of 64 x BLOCK_M / BLOCK_N.
struct GroupedTmaMaps {
  CUtensorMap a, b;
};

template <class Cfg, class Epilogue, class Scheduler>
__global__ void __launch_bounds__(Cfg::THREADS, 1)
    sm90_bf16_grouped_gemm(const GroupedGemmParams p, const typename Scheduler::Params sp,
                           const __grid_constant__ GroupedTmaMaps tm) {
  constexpr int BM = Cfg::BLOCK_M, BN = Cfg::BLOCK_N, STAGES = Cfg::STAGES, WN = Cfg::WG_TILE_N;

  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t s_base = ptx::smem_addr(smem);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + Cfg::OFF_BAR);
  uint64_t* empty = full + STAGES;
  auto a_stage = [&](uint32_t s) { return smem + s * Cfg::STAGE_BYTES; };
  auto b_stage = [&](uint32_t s) { return smem + s * Cfg::STAGE_BYTES + Cfg::A_BYTES; };

  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      ptx::mbar_init(full + s, 1);
      ptx::mbar_init(empty + s, Cfg::CONSUMER_WARPS);
    }
    ptx::mbar_fence_init();
  }
  __syncthreads();  // the last CTA-wide barrier: the roles split below

  const Scheduler sched(sp, BM);
  const int k_blocks = (p.K + Cfg::BLOCK_K - 1) / Cfg::BLOCK_K;

  if (tid < 128) {
    // ---------------- producer warpgroup
    ptx::setmaxnreg_dec<Cfg::PRODUCER_REGS>();
    if (tid == 0) {
      ptx::tma_prefetch_descriptor(&tm.a);
      ptx::tma_prefetch_descriptor(&tm.b);
      uint32_t it = 0;
      for (auto w = sched.first(); sched.valid(w); w = sched.next(w)) {
        const auto c = sched.coord(w);
        const int a_row = c.row_begin + c.m_block * BM;
        const int b_row = c.expert * p.N + c.n_block * BN;
        for (int kb = 0; kb < k_blocks; ++kb, ++it) {
          const uint32_t s = it % STAGES, ph = (it / STAGES) & 1;
          ptx::mbar_wait(empty + s, ph ^ 1);
          ptx::mbar_arrive_expect_tx(full + s, Cfg::STAGE_BYTES);
          ptx::tma_load_2d(a_stage(s), &tm.a, full + s, kb * Cfg::BLOCK_K, a_row);
          ptx::tma_load_2d(b_stage(s), &tm.b, full + s, kb * Cfg::BLOCK_K, b_row);
        }
      }
    }
    return;
  }

  // ---------------- consumer warpgroups
  ptx::setmaxnreg_inc<Cfg::CONSUMER_REGS>();
  const int cwg = (tid - 128) / 128;
  const int wg_m = Cfg::WG_M == 2 ? cwg : 0, wg_n = Cfg::WG_N == 2 ? cwg : 0;
  const int warp = (tid / 32) % 4, lane = tid & 31;
  uint16_t* stage = reinterpret_cast<uint16_t*>(smem + Cfg::OFF_STAGING) + ((tid - 128) / 32) * kStageWarpElems;
  // K-major, 128-byte swizzle: 8-row atoms 1024 bytes apart; a k step of 16
  // moves 32 bytes inside the atom (ptx/wgmma.cuh).
  const uint64_t a_desc0 = ptx::make_smem_desc_sw128(s_base + wg_m * 64 * 128, 16, 1024);
  const uint64_t b_desc0 = ptx::make_smem_desc_sw128(s_base + Cfg::A_BYTES + wg_n * WN * 128, 16, 1024);

  float acc[WN / 8][4];
  uint32_t it = 0;
  for (auto w = sched.first(); sched.valid(w); w = sched.next(w)) {
    const auto c = sched.coord(w);
    uint32_t prev_s = 0;
    for (int kb = 0; kb < k_blocks; ++kb, ++it) {
      const uint32_t s = it % STAGES, ph = (it / STAGES) & 1;
      ptx::mbar_wait(full + s, ph);
      ptx::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < Cfg::BLOCK_K / 16; ++kk)
        ptx::wgmma_ss_bf16<WN>(acc, ptx::smem_desc_advance(a_desc0, s * Cfg::STAGE_BYTES + kk * 32),
                               ptx::smem_desc_advance(b_desc0, s * Cfg::STAGE_BYTES + kk * 32), (kb | kk) != 0);
      ptx::wgmma_commit_group();
      // The previous k-block's group has finished reading its slot once at
      // most this one is pending: hand that slot back to the producer.
      ptx::wgmma_wait_group<1>();
      if (kb > 0 && lane == 0) ptx::mbar_arrive(empty + prev_s);
      prev_s = s;
    }
    ptx::wgmma_wait_group<0>();
    ptx::fence_operands(acc);
    if (lane == 0) ptx::mbar_arrive(empty + prev_s);
    const int row = c.row_begin + c.m_block * BM + wg_m * 64 + warp * 16;
    const int col0 = (c.n_block * BN + wg_n * WN) / Epilogue::kOutDiv;
    Epilogue::template store<WN / 8>(p, acc, row, c.row_end, col0, lane, stage);
  }
}

}  // namespace xstage::moe
