// Dispatch, step 2 (pull): each receiver copies the token rows routed to its
// experts from their sources' send buffers into its local pool, expert-major.
//
// A wait kernel first (wait_flags.cu) waits, timed, for the counts flags of
// every source of the launch's receivers: the count exchange is a barrier,
// no row has a place before every source's counts are in. One CTA then
// builds the plan, the other kernel's CTAs copy it from device memory: each
// symmetric value is read once, not once a CTA (on the host path such reads
// of one line queue behind one another: perf-log, MoE layer L11). Receivers
// are packed one after another, so the launch's experts form one grouped
// problem with plain cumulative offsets.
//
// Pulling (reads by the receiver) rather than pushing keeps the sources'
// route step to a few KiB of index stores, and the receiver issues the
// large reads its own pool needs, as many in flight as its warps allow.
#include "device/moe/layer_comm_launch.hpp"
#include "device/moe/layer_device.cuh"
#include "device/remote/row_table.cuh"

namespace xstage::moe {

namespace {

constexpr int kPlanThreads = 512;
constexpr int kPullThreads = 512;
constexpr size_t kPullMaxSmem = 200 * 1024;  // below the 227 KiB an H100/H200 CTA may opt in to

// One CTA: every source's counts (a few KiB, read once from wherever the
// receivers' symmetric areas live) into the pool order (receiver, e_loc,
// source, i) and the send order (receiver, source, e_loc, i), both by
// exclusive scans; the starts go to p.plan for the copy kernel's CTAs.
__global__ void __launch_bounds__(kPlanThreads) sm90_moe_pull_plan(PullParams p) {
  extern __shared__ int32_t plan[];  // pool_start[S + 1], then send_start[S + 1]
  __shared__ int32_t warp_tot[32];
  if (remote::wait_given_up(p.timeout_record)) return;  // the counts never came: the pool keeps its last plan
  const int P = p.P, E_loc = p.E_loc;
  const int S = p.n * E_loc * P;  // segments (receiver, e_loc, source)
  int32_t* pool_start = plan;
  int32_t* send_start = plan + S + 1;
  for (int q = int(threadIdx.x); q < S; q += kPlanThreads) {
    const int rl = q / (E_loc * P), e_loc = (q / P) % E_loc, s = q % P;
    const int32_t* counts = static_cast<const int32_t*>(p.counts[p.rank0 + rl]);
    int32_t c = __ldcg(counts + int64_t(s) * E_loc + e_loc);
    c = c < 0 ? 0 : (c > p.T_max ? p.T_max : c);  // a source routes each token at most once per expert
    pool_start[q] = c;
    send_start[(rl * P + s) * E_loc + e_loc] = c;
  }
  __syncthreads();
  const auto plain = [](const int32_t* a) { return *a; };
  cta_exclusive_scan(pool_start, S, warp_tot, plain);
  cta_exclusive_scan(send_start, S, warp_tot, plain);
  for (int e = int(threadIdx.x); e < p.n * E_loc; e += kPlanThreads) p.offs[e] = pool_start[(e + 1) * P];
  for (int i = int(threadIdx.x); i < 2 * (S + 1); i += kPlanThreads) p.plan[i] = plan[i];
}

// Every CTA copies the plan into shared memory; a pool row's segment is
// found by binary search in it, then its route entry is read and its
// metadata written (and, with copy_rows, the row copied).
__global__ void __launch_bounds__(kPullThreads) sm90_moe_pull(PullParams p) {
  extern __shared__ int32_t plan[];
  if (remote::wait_given_up(p.timeout_record)) return;  // the counts never came: the pool keeps its last plan
  const int P = p.P, E_loc = p.E_loc;
  const int S = p.n * E_loc * P;
  for (int i = int(threadIdx.x); i < 2 * (S + 1); i += kPullThreads) plan[i] = p.plan[i];
  __syncthreads();
  const int32_t* pool_start = plan;
  const int32_t* send_start = plan + S + 1;

  const int64_t total = pool_start[S] < p.n * p.rows_cap ? pool_start[S] : p.n * p.rows_cap;
  const int lane = int(threadIdx.x) & 31;
  const int64_t warp = int64_t(blockIdx.x) * (kPullThreads / 32) + (int(threadIdx.x) >> 5);
  const int64_t warps = int64_t(gridDim.x) * (kPullThreads / 32);
  const int vecs = p.H / 8;  // 16-byte vectors a row
  const int64_t area = int64_t(P) * E_loc * p.T_max;
  // Pool row g: its source s and token t (t = -1: no valid route), and, with
  // `write`, its weight, destination and send-order index.
  const auto plan_row = [&](int64_t g, bool write, int& s, int& t) {
    int lo = 0, hi = S;  // the last segment whose start is <= g (empty segments share a start)
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (pool_start[mid] <= g)
        lo = mid;
      else
        hi = mid;
    }
    const int q = lo, rl = q / (E_loc * P), e_loc = (q / P) % E_loc;
    s = q % P;
    const int32_t i = int32_t(g - pool_start[q]);
    const int64_t entry = (int64_t(s) * E_loc + e_loc) * p.T_max + i;
    const int32_t* routes = static_cast<const int32_t*>(p.routes[p.rank0 + rl]);
    const int32_t pair = __ldcg(routes + entry);
    const float weight = __ldcg(reinterpret_cast<const float*>(routes + area) + entry);
    const int tt = pair / p.k, j = pair % p.k;
    t = -1;
    if (tt < 0 || tt >= p.T_max) return;  // never for the routes a route kernel wrote
    t = tt;
    if (write) {
      p.row_weight[g] = weight;
      p.row_dest_rank[g] = s;
      p.row_dest_slot[g] = j * p.T_max + t;
      p.row_perm[g] = send_start[(rl * P + s) * E_loc + e_loc] + i;
    }
  };
  if (!p.copy_rows) {
    // The plan only (the fused variant): a lane a row, so that a warp's
    // route reads are 32 neighbouring entries (one request where they share
    // a line: on the host path each request is a PCIe round trip).
    for (int64_t g = warp * 32 + lane; g - lane < total; g += warps * 32) {
      int s, t;
      if (g < total) plan_row(g, true, s, t);
    }
    return;
  }
  // Rows too (the unfused variant): a warp a row, as many rows in flight as
  // the grid has warps; its lanes read the same route entry (one request).
  for (int64_t g = warp; g < total; g += warps) {
    int s, t;
    plan_row(g, lane == 0, s, t);
    if (t < 0) continue;  // the same for the whole warp
    const uint4* src = reinterpret_cast<const uint4*>(remote::source_row(p.x_send, s, t, p.H));
    uint4* dst = reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.pool_x) + g * p.H);
    warp_copy_row(src, dst, vecs, lane);
  }
}

}  // namespace

size_t moe_pull_smem_bytes(int n, int P, int E_loc) { return 2 * (size_t(n) * P * E_loc + 1) * sizeof(int32_t); }

size_t moe_pull_max_smem_bytes() { return kPullMaxSmem; }

int preload_moe_pull() {
  cudaFuncAttributes a;
  cudaError_t e = cudaFuncGetAttributes(&a, sm90_moe_pull_plan);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, sm90_moe_pull);
  return int(e);
}

int launch_moe_pull(const PullParams& p, int grid, cudaStream_t stream) {
  const size_t smem = moe_pull_smem_bytes(p.n, p.P, p.E_loc);
  if (smem > kPullMaxSmem || p.plan == nullptr) return int(cudaErrorInvalidValue);
  if (smem > 48 * 1024) {
    for (const void* f : {reinterpret_cast<const void*>(sm90_moe_pull_plan), reinterpret_cast<const void*>(sm90_moe_pull)}) {
      const cudaError_t e = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      if (e != cudaSuccess) return int(e);
    }
  }
  sm90_moe_pull_plan<<<1, kPlanThreads, smem, stream>>>(p);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return int(e);
  sm90_moe_pull<<<unsigned(grid), kPullThreads, smem, stream>>>(p);
  return int(cudaGetLastError());
}

}  // namespace xstage::moe
