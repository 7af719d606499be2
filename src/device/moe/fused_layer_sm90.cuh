#pragma once
// sm90_fused_moe_layer: L1 + SwiGLU and L2 of every expert of the launch in
// one persistent kernel (fused_layer_params.hpp has the layouts). The
// mainloop is the GEMM mainloop (gemm/mainloop_sm90.cuh: a TMA producer
// thread, two wgmma consumer warpgroups, the stage ring), as in the grouped
// GEMM; what differs:
//   - work comes from the layer's claim policy (sched/layer_claims.cuh): the
//     producer thread claims a tile, hands it to the consumers through a
//     second, small stage ring whose slots hold tasks (pipeline/stage_ring.cuh),
//     and loads its operands; the consumers take tiles from the ring in order;
//   - an L1 tile's epilogue writes SwiGLU(acc) x routing weight into h, then
//     counts itself done for its expert (release); an L2 tile's producer waits
//     (acquire, with a timeout) until every L1 tile of its expert is counted
//     before it loads h: the rows an L2 tile reads may come from any CTA;
//   - an L2 tile's epilogue stores each row to its token's owner: the combine
//     buffer of rank row_dest_rank[r], slot row_dest_slot[r]
//     (remote::RowTable; on a host-mapped or peer buffer these are the
//     remote stores whose X-Stage the schedule decides on), or locally, by
//     16-byte stores from warp-staged rows (the consumers issue every store
//     before their next mainloop);
//   - with x_send set, the producer warpgroup's three spare warps copy the
//     dispatched rows into the pool while the first tiles compute (the
//     dispatch's bulk overlaps L1 instead of preceding it); an L1 tile's
//     producer waits until the pool rows it reads are counted copied
//     (blocks of kFusedCopyBlockRows rows: the first tiles of a large
//     expert start after a block, not after the whole expert);
//   - at the end the grid's last CTA sets every destination's done flag for
//     the launch's ranks (release, system scope) and zeroes the workspace.
#include <cstdint>

#include <cuda.h>

#include "device/gemm/epilogue_stores.cuh"
#include "device/gemm/epilogue_values.cuh"
#include "device/gemm/mainloop_sm90.cuh"
#include "device/moe/fused_layer_claims.cuh"
#include "device/moe/fused_layer_params.hpp"
#include "device/moe/layer_device.cuh"
#include "device/ptx/atomic_gpu.cuh"
#include "device/ptx/fence.cuh"
#include "device/ptx/flags.cuh"
#include "device/ptx/timer.cuh"
#include "device/remote/publish.cuh"
#include "device/remote/row_table.cuh"
#include "device/remote/timed_wait.cuh"

namespace xstage::moe {

// A as 2-D (K, rows_cap), B as 2-D (K, E_run * N), per GEMM.
struct FusedTmaMaps {
  CUtensorMap a1, b1, a2, b2;
};

// The task ring after the grouped GEMM's shared-memory plan (its slack
// before the 1024-byte alignment reserve holds it).
template <class Cfg>
struct FusedSmem {
  static constexpr int kSlots = 4;
  static constexpr size_t OFF_TASKS = (Cfg::OFF_SPLIT_FLAG + 16 + 15) / 16 * 16;
  static constexpr size_t OFF_TASK_BARS = OFF_TASKS + kSlots * sizeof(sched::LayerTask);
  using TaskRing = pipeline::StageRing<kSlots>;
  // Whether this CTA counted itself in last (the consumers' thread 0 writes
  // it): here rather than as a static __shared__, which the kernel's
  // dynamic window would sit after, out of sight of the assert below.
  static constexpr size_t OFF_LAST_CTA = OFF_TASK_BARS + TaskRing::kBarriers * 8;
  static constexpr size_t END = OFF_LAST_CTA + 16;
  static constexpr size_t BYTES = END + 1024;
  static_assert(BYTES <= Cfg::SMEM_LIMIT, "the task ring fits the shared memory");
};

// The producer's wait until counter `c` holds `need` (an expert's L1 tiles
// done, or a block of rows copied), acquire, with the library's timed wait
// (rank -1: L1 tiles, -2: rows copied; flag = the expert).
__device__ __forceinline__ void wait_count(const FusedLayerParams& p, const int32_t* c, int need, int kind,
                                           int expert) {
  const int seen = ptx::ld_acquire_gpu_s32(c);
  if (seen < need)
    remote::wait_geq([c] { return uint64_t(ptx::ld_acquire_gpu_s32(c)); }, uint64_t(seen), uint64_t(need),
                     remote::start_wait(p.timeout_ns, p.timeout_record), kind, expert);
  // The rows were written through the generic proxy; the TMA reads them through the async one.
  ptx::fence_proxy_async_global();
}

// Where pool row r came from (the dispatch's source rows: x_send of the rank
// that owns the token, its slot modulo T_max) and where its L2 row goes (the
// same rank's combine buffer, at the slot).
__device__ __forceinline__ remote::RowTable dispatch_sources(const FusedLayerParams& p) {
  return remote::RowTable{p.x_send, p.row_dest_rank, p.row_dest_slot, p.hidden, p.T_max};
}
__device__ __forceinline__ remote::RowTable combine_rows(const FusedLayerParams& p) {
  return remote::RowTable{p.combine, p.row_dest_rank, p.row_dest_slot, p.hidden, 0};
}

// The launch's pool rows (the last expert's end, within the pool).
__device__ __forceinline__ int pool_rows(const FusedLayerParams& p) {
  const int rows = __ldg(p.offs + p.E_run - 1);
  return rows < 0 ? 0 : rows > p.rows_cap ? p.rows_cap : rows;
}

// The dispatch's row copies, by one warp of the producer warpgroup: chunks
// of pool rows claimed from a global cursor in pool order (the order L1
// claims its experts), each row's 16-byte vectors spread over the lanes,
// several loads in flight before their stores (over PCIe a load takes
// microseconds). Then the rows are counted in their block (fence, release
// add; a chunk lies in one block).
__device__ __forceinline__ void copy_rows(const FusedLayerParams& p, int lane) {
  constexpr int kChunk = kFusedCopyChunkRows, kUnroll = 4;
  int32_t* copied = p.counters + 4 + p.E_run;
  const int rows = pool_rows(p);
  const int vecs = p.hidden / 8;
  const remote::RowTable send = dispatch_sources(p);
  for (;;) {
    int start = 0;
    if (lane == 0) start = atomicAdd(p.counters + 3, kChunk);
    start = __shfl_sync(0xffffffffu, start, 0);
    if (start >= rows) break;
    const int end = start + kChunk < rows ? start + kChunk : rows;
    for (int r = start; r < end; ++r) {
      const uint4* src = reinterpret_cast<const uint4*>(send.row(r));
      uint4* dst = reinterpret_cast<uint4*>(const_cast<uint16_t*>(static_cast<const uint16_t*>(p.x_pool)) +
                                            int64_t(r) * p.hidden);
      for (int v0 = lane; v0 < vecs; v0 += 32 * kUnroll) {
        uint4 x[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (v0 + u * 32 < vecs) x[u] = __ldcg(src + v0 + u * 32);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (v0 + u * 32 < vecs) dst[v0 + u * 32] = x[u];
      }
    }
    __threadfence();
    __syncwarp();
    if (lane == 0) ptx::red_release_gpu_add_s32(copied + start / kFusedCopyBlockRows, end - start);
  }
}

// An L1 tile's wait for the pool rows [r0, r1) it reads: every block they
// touch fully copied (a block's rows past the pool's end are never copied).
__device__ __forceinline__ void wait_rows_copied(const FusedLayerParams& p, int rows, int r0, int r1, int expert) {
  const int32_t* copied = p.counters + 4 + p.E_run;
  r1 = r1 < rows ? r1 : rows;
  for (int b = r0 / kFusedCopyBlockRows; b * kFusedCopyBlockRows < r1; ++b) {
    const int in_block = rows - b * kFusedCopyBlockRows;
    wait_count(p, copied + b, in_block < kFusedCopyBlockRows ? in_block : kFusedCopyBlockRows, -2, expert);
  }
}

__device__ __forceinline__ void trace_tile(const FusedTrace& tr, const sched::LayerTask& t, uint64_t start,
                                           uint64_t epi, uint64_t end) {
  if (t.index >= tr.tiles) return;
  uint64_t* r = tr.buf + (int64_t(t.gemm - 1) * tr.tiles + t.index) * 4;
  r[0] = start, r[1] = epi, r[2] = end, r[3] = ptx::smid();
}

// kTrace: the diagnostic build of the kernel that stamps every tile's times
// into `trace` (FusedTrace); the production one has no such code.
template <class Cfg, bool kTrace>
__global__ void __launch_bounds__(Cfg::THREADS, 1)
    sm90_fused_moe_layer(const FusedLayerParams p, const __grid_constant__ FusedTmaMaps tm, const FusedTrace trace) {
  constexpr int BM = Cfg::BLOCK_M, BN = Cfg::BLOCK_N, WN = Cfg::WG_TILE_N;
  using Smem = FusedSmem<Cfg>;

  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const gemm::Sm90Mainloop<Cfg> mainloop(smem, reinterpret_cast<uint64_t*>(smem + Cfg::OFF_BAR));
  auto* tasks = reinterpret_cast<sched::LayerTask*>(smem + Smem::OFF_TASKS);
  const typename Smem::TaskRing task_ring(reinterpret_cast<uint64_t*>(smem + Smem::OFF_TASK_BARS));

  // Every thread reads the same record, set (or not) before this launch began.
  if (remote::wait_given_up(p.pull_record)) return;

  const int tid = threadIdx.x;
  if (tid == 0) {
    mainloop.init();
    task_ring.init(Cfg::CONSUMER_WARPS);
    ptx::mbar_fence_init();
  }
  __syncthreads();

  const int kb1 = (p.hidden + Cfg::BLOCK_K - 1) / Cfg::BLOCK_K, kb2 = (p.inter + Cfg::BLOCK_K - 1) / Cfg::BLOCK_K;
  const int n1 = (2 * p.inter + BN - 1) / BN;  // L1's n-blocks (the last may reach past 2 inter)

  if (tid < 128) {
    // ---------------- producer: claims, hands over, loads
    ptx::setmaxnreg_dec<Cfg::PRODUCER_REGS>();
    if (tid == 0) {
      ptx::tma_prefetch_descriptor(&tm.a1);
      ptx::tma_prefetch_descriptor(&tm.b1);
      ptx::tma_prefetch_descriptor(&tm.a2);
      ptx::tma_prefetch_descriptor(&tm.b2);
      sched::LayerClaims claims(fused_claims_params(p, BN), BM);
      const int rows = p.x_send != nullptr ? pool_rows(p) : 0;
      uint32_t it = 0;
      sched::LayerTask task = claims.first();
      for (uint32_t n = 0;; ++n, task = claims.next(task)) {
        const uint32_t slot = task_ring.acquire(n);
        tasks[slot] = task;       // the item past the end (gemm 0) ends the consumers too
        task_ring.commit(slot);  // releases the slot's write to the consumers
        if (!claims.valid(task)) break;
        const bool l2 = task.gemm == 2;
        if (l2)
          wait_count(p, p.counters + 4 + task.expert, task.m_blocks * n1, -1, task.expert);
        else if (p.x_send != nullptr)
          wait_rows_copied(p, rows, task.row_begin + task.m_block * BM,
                           task.row_begin + (task.m_block + 1) * BM < task.row_end
                               ? task.row_begin + (task.m_block + 1) * BM
                               : task.row_end,
                           task.expert);
        const CUtensorMap* ma = l2 ? &tm.a2 : &tm.a1;
        const CUtensorMap* mb = l2 ? &tm.b2 : &tm.b1;
        const int a_row = task.row_begin + task.m_block * BM;
        const int b_row = task.expert * (l2 ? p.hidden : 2 * p.inter) + task.n_block * BN;
        mainloop.load(it, ma, mb, a_row, b_row, 0, l2 ? kb2 : kb1);
      }
    } else if (tid >= 32) {
      if (p.x_send != nullptr) copy_rows(p, tid & 31);
      // The consumers count their CTA finished only after its copies: the
      // last CTA then zeroes a cursor no copy still moves.
      ptx::named_bar_arrive(2, 256 + 96);
    }
    return;
  }

  // ---------------- consumer warpgroups
  ptx::setmaxnreg_inc<Cfg::CONSUMER_REGS>();
  const int ct = tid - 128;
  const int cwg = ct / 128;
  const int wg_m = Cfg::WG_M == 2 ? cwg : 0, wg_n = Cfg::WG_N == 2 ? cwg : 0;
  const int warp = (tid / 32) % 4, lane = tid & 31;
  uint16_t* stage = reinterpret_cast<uint16_t*>(smem + Cfg::OFF_STAGING) + (ct / 32) * gemm::kStageWarpElems;
  const uint64_t a_desc0 = mainloop.a_desc(wg_m), b_desc0 = mainloop.b_desc(wg_n);
  const remote::RowTable combine = combine_rows(p);
  const gemm::LocalRows h_rows{static_cast<uint16_t*>(p.h), p.inter};
  const gemm::LocalRows out_rows{static_cast<uint16_t*>(p.out_pool), p.hidden};

  float acc[WN / 8][4];
  uint32_t it = 0;
  for (uint32_t n = 0;; ++n) {
    const uint32_t slot = task_ring.wait(n);
    const sched::LayerTask task = tasks[slot];
    __syncwarp();
    if (lane == 0) task_ring.release(slot);
    if (task.gemm == 0) break;
    const bool l2 = task.gemm == 2;
    const uint64_t t_start = kTrace && ct == 0 ? ptx::globaltimer_ns() : 0;
    mainloop.template mma<WN>(it, acc, a_desc0, b_desc0, 0, l2 ? kb2 : kb1, lane);
    const uint64_t t_epi = kTrace && ct == 0 ? ptx::globaltimer_ns() : 0;

    const int tile_row = task.row_begin + task.m_block * BM;
    const int row = tile_row + wg_m * 64 + warp * 16;
    const int col = task.n_block * BN + wg_n * WN;
    if (!l2) {
      constexpr int OB = WN / 8 / gemm::SwigluEpilogue::kOutDiv;
      const auto out = gemm::SwigluEpilogue::template outputs<WN / 8>(p.row_weight, acc, row, task.row_end, lane);
      gemm::store_staged_clipped<OB>(stage, h_rows, row, task.row_end, col / 2, p.inter, lane, out);
      // Counted done once every consumer thread's h stores are visible at GPU
      // scope (fence, barrier, release add); the L2 producer acquires.
      __threadfence();
      ptx::named_bar_sync(1, 256);
      if (ct == 0) ptx::red_release_gpu_add_s32(p.counters + 4 + task.expert, 1);
    } else {
      constexpr int OB = WN / 8;
      const auto out = gemm::PlainEpilogue::template outputs<WN / 8>(nullptr, acc, row, task.row_end, lane);
      // L2's rows go to their tokens' owners (remote::RowTable), or to the
      // local pool (the compute-only floor, the unfused baseline's L2).
      if (p.combine != nullptr)
        gemm::store_staged_clipped<OB>(stage, combine, row, task.row_end, col, p.hidden, lane, out);
      else
        gemm::store_staged_clipped<OB>(stage, out_rows, row, task.row_end, col, p.hidden, lane, out);
    }
    if constexpr (kTrace)
      if (ct == 0) trace_tile(trace, task, t_start, t_epi, ptx::globaltimer_ns());
  }

  // ---------------- the launch's end
  // Each thread's stores (remote ones at system scope) before its CTA counts
  // itself finished; the last CTA then knows every tile is stored.
  if (p.combine != nullptr)
    ptx::fence_sc_sys();
  else
    __threadfence();
  ptx::named_bar_sync(2, 256 + 96);
  volatile int& last_cta = *reinterpret_cast<volatile int*>(smem + Smem::OFF_LAST_CTA);
  if (ct == 0) {
    last_cta = atomicAdd(p.counters + 2, 1) == int(gridDim.x) - 1;
    if (last_cta) ptx::fence_acq_rel_sys();
  }
  ptx::named_bar_sync(1, 256);
  if (last_cta) {
    // Every other CTA has stopped claiming and counting: the workspace is
    // zeroed for the next launch (the copied-rows blocks the pool's rows
    // touched; no copy counted any other), by the CTA's consumers.
    const int blocks = p.x_send != nullptr ? (pool_rows(p) + kFusedCopyBlockRows - 1) / kFusedCopyBlockRows : 0;
    for (int i = ct; i < 4 + p.E_run + blocks; i += 256) p.counters[i] = 0;
    // A wait of this launch that timed out left rows computed from what had
    // not arrived: no done flag, so no rank sums them (each times out naming
    // this one).
    const bool lost = remote::wait_given_up(p.timeout_record);
    if (ct == 0 && p.flags != nullptr && !lost)
      remote::publish_flags(p.flags, p.world, p.done_flag + p.rank0, p.local_ranks,
                            run_epoch(p.epoch_at, p.epoch));
  }
}

}  // namespace xstage::moe
