#pragma once
// sm90_fused_moe_layer: L1 + SwiGLU and L2 of every expert of the launch in
// one persistent kernel (fused_layer_params.hpp has the layouts). The
// mainloop is the grouped GEMM's (grouped_gemm_sm90.cuh: a TMA producer
// thread, two wgmma consumer warpgroups, a ring of k-block stages); what
// differs:
//   - work comes from the layer's claim policy (sched/layer_claims.cuh): the
//     producer thread claims a tile, hands it to the consumers through a small
//     ring of task slots in shared memory (a full and an empty barrier each),
//     and loads its operands; the consumers take tiles from the ring in order;
//   - an L1 tile's epilogue writes SwiGLU(acc) x routing weight into h, then
//     counts itself done for its expert (release); an L2 tile's producer waits
//     (acquire, with a timeout) until every L1 tile of its expert is counted
//     before it loads h: the rows an L2 tile reads may come from any CTA;
//   - an L2 tile's epilogue stores each row to its token's owner: the combine
//     buffer of rank row_dest_rank[r], slot row_dest_slot[r] (on a
//     host-mapped or peer buffer these are the remote stores whose X-Stage
//     the schedule decides on), or locally: by 16-byte stores from
//     warp-staged rows (the consumers issue every store before their next
//     mainloop), or (kBulk) the whole tile staged in shared memory and each
//     row sent as one TMA bulk copy, so that the consumers return to the
//     mainloop while the copy engine issues the tile (the grouped GEMM's
//     bulk output store; it costs a ring stage of shared memory);
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

#include "device/moe/epilogue_store.cuh"
#include "device/moe/fused_layer_claims.cuh"
#include "device/moe/fused_layer_params.hpp"
#include "device/moe/grouped_gemm_config.cuh"
#include "device/moe/layer_device.cuh"
#include "device/ptx/atomic_gpu.cuh"
#include "device/ptx/fence.cuh"
#include "device/ptx/flags.cuh"
#include "device/ptx/mbarrier.cuh"
#include "device/ptx/timer.cuh"
#include "device/ptx/tma.cuh"
#include "device/ptx/wgmma.cuh"

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
  // Whether this CTA counted itself in last (the consumers' thread 0 writes
  // it): here rather than as a static __shared__, which the kernel's
  // dynamic window would sit after, out of sight of the assert below.
  static constexpr size_t OFF_LAST_CTA = OFF_TASK_BARS + 2 * kSlots * 8;
  static constexpr size_t END = OFF_LAST_CTA + 16;
  static constexpr size_t BYTES = END + 1024;
  static_assert(BYTES <= Cfg::SMEM_LIMIT, "the task ring fits the shared memory");
};

// The producer's wait until counter `c` holds `need` (an expert's L1 tiles
// done, or a block of rows copied), acquire, with a timeout that fills the
// record (rank -1: L1 tiles, -2: rows copied; flag = the expert).
__device__ __forceinline__ void wait_count(const FusedLayerParams& p, const int32_t* c, int need, int kind,
                                           int expert) {
  int seen = ptx::ld_acquire_gpu_s32(c);
  if (seen < need) {
    const uint64_t start = ptx::globaltimer_ns();
    while (seen < need) {
      const uint64_t waited = ptx::globaltimer_ns() - start;
      remote::FlagTimeoutRecord* r = p.timeout_record;
      // Once a wait of the launch has timed out the run is lost: later tiles
      // stop waiting at once instead of each waiting the full timeout.
      const bool given_up = r != nullptr && *static_cast<volatile unsigned int*>(&r->set) != 0u;
      if (waited > p.timeout_ns || given_up) {
        if (!given_up && r != nullptr && atomicCAS(&r->set, 0u, 1u) == 0u) {
          r->rank = kind, r->flag = expert, r->block = int(blockIdx.x), r->thread = int(threadIdx.x);
          r->waited_ns = waited, r->expected = uint64_t(need), r->seen = uint64_t(seen);
        }
        break;  // the host reports the record; the launch still ends
      }
      __nanosleep(128);
      seen = ptx::ld_acquire_gpu_s32(c);
    }
  }
  // The rows were written through the generic proxy; the TMA reads them through the async one.
  ptx::fence_proxy_async_global();
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
  for (;;) {
    int start = 0;
    if (lane == 0) start = atomicAdd(p.counters + 3, kChunk);
    start = __shfl_sync(0xffffffffu, start, 0);
    if (start >= rows) break;
    const int end = start + kChunk < rows ? start + kChunk : rows;
    for (int r = start; r < end; ++r) {
      const int s = __ldg(p.row_dest_rank + r), t = __ldg(p.row_dest_slot + r) % p.T_max;
      const uint4* src = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.x_send[s]) + int64_t(t) * p.hidden);
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

__device__ __forceinline__ void trace_tile(const FusedLayerParams& p, const sched::LayerTask& t, uint64_t start,
                                           uint64_t epi, uint64_t end) {
  if (p.trace == nullptr || t.index >= p.trace_tiles) return;
  uint64_t* r = p.trace + (int64_t(t.gemm - 1) * p.trace_tiles + t.index) * 4;
  r[0] = start, r[1] = epi, r[2] = end, r[3] = ptx::smid();
}

// kBulk: Cfg stages a whole L2 tile (OUT_COLS = BLOCK_N); L1's warp-staged
// rows then live in that area too.
template <class Cfg, bool kBulk>
__global__ void __launch_bounds__(Cfg::THREADS, 1)
    sm90_fused_moe_layer(const FusedLayerParams p, const __grid_constant__ FusedTmaMaps tm) {
  constexpr int BM = Cfg::BLOCK_M, BN = Cfg::BLOCK_N, STAGES = Cfg::STAGES, WN = Cfg::WG_TILE_N;
  using Smem = FusedSmem<Cfg>;
  constexpr int kSlots = Smem::kSlots;

  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t s_base = ptx::smem_addr(smem);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + Cfg::OFF_BAR);
  uint64_t* empty = full + STAGES;
  auto* tasks = reinterpret_cast<sched::LayerTask*>(smem + Smem::OFF_TASKS);
  uint64_t* task_full = reinterpret_cast<uint64_t*>(smem + Smem::OFF_TASK_BARS);
  uint64_t* task_empty = task_full + kSlots;
  auto a_stage = [&](uint32_t s) { return smem + s * Cfg::STAGE_BYTES; };
  auto b_stage = [&](uint32_t s) { return smem + s * Cfg::STAGE_BYTES + Cfg::A_BYTES; };

  // Every thread reads the same record, set (or not) before this launch began.
  if (wait_failed(p.pull_record)) return;

  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      ptx::mbar_init(full + s, 1);
      ptx::mbar_init(empty + s, Cfg::CONSUMER_WARPS);
    }
    for (int s = 0; s < kSlots; ++s) {
      ptx::mbar_init(task_full + s, 1);
      ptx::mbar_init(task_empty + s, Cfg::CONSUMER_WARPS);
    }
    ptx::mbar_fence_init();
  }
  __syncthreads();

  const int kb1 = (p.hidden + Cfg::BLOCK_K - 1) / Cfg::BLOCK_K, kb2 = (p.inter + Cfg::BLOCK_K - 1) / Cfg::BLOCK_K;
  const int n1 = 2 * p.inter / BN;

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
        const uint32_t slot = n % kSlots, ph = (n / kSlots) & 1;
        ptx::mbar_wait(task_empty + slot, ph ^ 1);
        tasks[slot] = task;  // the item past the end (gemm 0) ends the consumers too
        ptx::mbar_arrive(task_full + slot);  // releases the slot's write to the consumers
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
        const int kbs = l2 ? kb2 : kb1;
        for (int kb = 0; kb < kbs; ++kb, ++it) {
          const uint32_t s = it % STAGES, sp = (it / STAGES) & 1;
          ptx::mbar_wait(empty + s, sp ^ 1);
          ptx::mbar_arrive_expect_tx(full + s, Cfg::STAGE_BYTES);
          ptx::tma_load_2d(a_stage(s), ma, full + s, kb * Cfg::BLOCK_K, a_row);
          ptx::tma_load_2d(b_stage(s), mb, full + s, kb * Cfg::BLOCK_K, b_row);
        }
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
  uint16_t* stage = reinterpret_cast<uint16_t*>(smem + Cfg::OFF_STAGING) + (ct / 32) * kStageWarpElems;
  uint8_t* out_tile = smem + Cfg::OFF_STAGING;
  static_assert(!kBulk || Cfg::OUT_COLS == Cfg::BLOCK_N, "the bulk store stages a whole L2 tile");
  static_assert(!kBulk || size_t(Cfg::CONSUMER_WARPS) * kStageWarpElems * 2 <= Cfg::STAGING_BYTES,
                "L1's warp rows fit the staged tile's area");
  const uint64_t a_desc0 = ptx::make_smem_desc_sw128(s_base + wg_m * 64 * 128, 16, 1024);
  const uint64_t b_desc0 = ptx::make_smem_desc_sw128(s_base + Cfg::A_BYTES + wg_n * WN * 128, 16, 1024);

  float acc[WN / 8][4];
  uint32_t it = 0;
  for (uint32_t n = 0;; ++n) {
    const uint32_t slot = n % kSlots;
    ptx::mbar_wait(task_full + slot, (n / kSlots) & 1);
    const sched::LayerTask task = tasks[slot];
    __syncwarp();
    if (lane == 0) ptx::mbar_arrive(task_empty + slot);
    if (task.gemm == 0) break;
    const bool l2 = task.gemm == 2;
    const uint64_t t_start = ct == 0 && p.trace != nullptr ? ptx::globaltimer_ns() : 0;
    const int kbs = l2 ? kb2 : kb1;
    uint32_t prev_s = 0;
    for (int kb = 0; kb < kbs; ++kb, ++it) {
      const uint32_t s = it % STAGES, ph = (it / STAGES) & 1;
      ptx::mbar_wait(full + s, ph);
      ptx::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < Cfg::BLOCK_K / 16; ++kk)
        ptx::wgmma_ss_bf16<WN>(acc, ptx::smem_desc_advance(a_desc0, s * Cfg::STAGE_BYTES + kk * 32),
                               ptx::smem_desc_advance(b_desc0, s * Cfg::STAGE_BYTES + kk * 32), kb != 0 || kk != 0);
      ptx::wgmma_commit_group();
      ptx::wgmma_wait_group<1>();
      if (kb > 0 && lane == 0) ptx::mbar_arrive(empty + prev_s);
      prev_s = s;
    }
    ptx::wgmma_wait_group<0>();
    ptx::fence_operands(acc);
    if (lane == 0) ptx::mbar_arrive(empty + prev_s);
    const uint64_t t_epi = ct == 0 && p.trace != nullptr ? ptx::globaltimer_ns() : 0;

    const int tile_row = task.row_begin + task.m_block * BM;
    const int row = tile_row + wg_m * 64 + warp * 16;
    const int col = task.n_block * BN + wg_n * WN;
    if constexpr (kBulk) {
      // The previous tile's row copies must have read the staged tile before
      // it is overwritten: each sender waits for its own, the barrier for all.
      if (ct < BM) ptx::bulk_wait_group_read_all();
      ptx::named_bar_sync(1, 256);
    }
    if (!l2) {
      constexpr int OB = WN / 8 / SwigluStoreEpilogue::kOutDiv;
      const auto out = SwigluStoreEpilogue::template outputs<WN / 8>(p.row_weight, acc, row, task.row_end, lane);
      store_staged<OB>(stage, static_cast<uint16_t*>(p.h), p.inter, row, task.row_end, col / 2, lane, out);
      // Counted done once every consumer thread's h stores are visible at GPU
      // scope (fence, barrier, release add); the L2 producer acquires.
      __threadfence();
      ptx::named_bar_sync(1, 256);
      if (ct == 0) ptx::red_release_gpu_add_s32(p.counters + 4 + task.expert, 1);
    } else {
      constexpr int OB = WN / 8;
      const auto out = PlainStoreEpilogue::template outputs<WN / 8>(nullptr, acc, row, task.row_end, lane);
      if constexpr (kBulk) {
        stage_tile_rows<OB, Cfg::OUT_ROW_BYTES>(out_tile, wg_m * 64 + warp * 16, wg_n * WN, lane, out);
        ptx::fence_proxy_async_shared();  // generic writes to shared memory, read next by the TMA unit
        ptx::named_bar_sync(1, 256);
        const int r = tile_row + ct;
        if (ct < BM && r < task.row_end) {
          uint16_t* dst = p.combine != nullptr
                              ? static_cast<uint16_t*>(p.combine[__ldg(p.row_dest_rank + r)]) +
                                    int64_t(__ldg(p.row_dest_slot + r)) * p.hidden
                              : static_cast<uint16_t*>(p.out_pool) + int64_t(r) * p.hidden;
          ptx::bulk_store_s2g(dst + task.n_block * BN, out_tile + ct * Cfg::OUT_ROW_BYTES, BN * 2);
          ptx::bulk_commit_group();
        }
      } else if (p.combine != nullptr) {
        const int row_end = task.row_end;
        store_staged_rows<OB>(
            stage, col, lane,
            [&](int r) {
              if (row + r >= row_end) return static_cast<uint16_t*>(nullptr);
              const int rank = __ldg(p.row_dest_rank + row + r);
              const int64_t slot_row = __ldg(p.row_dest_slot + row + r);
              return static_cast<uint16_t*>(p.combine[rank]) + slot_row * p.hidden;
            },
            out);
      } else {
        store_staged<OB>(stage, static_cast<uint16_t*>(p.out_pool), p.hidden, row, task.row_end, col, lane, out);
      }
    }
    if (ct == 0 && p.trace != nullptr) trace_tile(p, task, t_start, t_epi, ptx::globaltimer_ns());
  }

  // ---------------- the launch's end
  // Each thread's stores (remote ones at system scope) before its CTA counts
  // itself finished; the last CTA then knows every tile is stored. Bulk
  // copies first complete, then are ordered before the generic fence.
  if constexpr (kBulk) {
    if (ct < BM) ptx::bulk_wait_group_all();
    ptx::fence_proxy_async_global();
  }
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
    const bool lost = wait_failed(p.timeout_record);
    if (ct == 0 && p.flags != nullptr && !lost)
      for (int d = 0; d < p.world; ++d)
        for (int s = 0; s < p.local_ranks; ++s)
          ptx::st_release_sys_u64(p.flags[d] + p.done_flag + p.rank0 + s, p.epoch);
  }
}

}  // namespace xstage::moe
