// The one-GPU MoE layer's routing (token_route_params.hpp): count, then
// scatter. Two kernels because every pair's row depends on every CTA's
// counts (a grid-wide dependency); within them no atomics decide a row, so
// the same input gives the same rows on every run.
#include <climits>

#include "device/moe/layer_device.cuh"
#include "device/moe/token_route_params.hpp"

namespace xstage::moe {

namespace {

constexpr int kCountThreads = 256;
constexpr int kScatterThreads = 1024;  // all 32 warps copy rows
constexpr int kRankWarps = 8;          // ranking takes 256 tokens a step: warp_count stays 8 E ints
constexpr int kRankThreads = kRankWarps * 32;

// An id as int, clamped: an int64 id beyond int's range is out of range all the same.
__device__ __forceinline__ int load_id(const TokenRouteParams& p, int64_t q) {
  if (!p.ids_int64) return static_cast<const int32_t*>(p.topk_ids)[q];
  const int64_t v = static_cast<const int64_t*>(p.topk_ids)[q];
  return v < INT_MIN ? INT_MIN : (v > INT_MAX ? INT_MAX : int(v));
}

__device__ __forceinline__ float load_weight(const TokenRouteParams& p, int64_t q) {
  if (!p.weights_bf16) return static_cast<const float*>(p.topk_weights)[q];
  return __uint_as_float(uint32_t(static_cast<const uint16_t*>(p.topk_weights)[q]) << 16);
}

// Pair (t, j)'s expert, or -1 (and why, in kind) when it is routed nowhere:
// out of range, or the id of an earlier slot of the same token (the first
// slot keeps it). Both kernels decide alike, so their counts agree.
__device__ __forceinline__ int routed_expert(const TokenRouteParams& p, int t, int j, int& kind) {
  const int64_t first = int64_t(t) * p.k;
  const int e = load_id(p, first + j);
  if (e < 0 || e >= p.E) {
    kind = kTokenRouteIdOutOfRange;
    return -1;
  }
  for (int i = 0; i < j; ++i)
    if (load_id(p, first + i) == e) {
      kind = kTokenRouteIdRepeated;
      return -1;
    }
  kind = 0;
  return e;
}

__device__ __forceinline__ void record_error(TokenRouteError* r, int kind, int t, int j, int id, int E) {
  if (r != nullptr && atomicCAS(&r->set, 0, 1) == 0) r->kind = kind, r->token = t, r->slot = j, r->id = id, r->experts = E;
}

struct TokenRange {
  int begin, end;
};
__device__ __forceinline__ TokenRange block_tokens(const TokenRouteParams& p) {
  const int per = token_route_per_block(p.T, p.blocks);
  const int begin = int(blockIdx.x) * per;
  return {begin, begin + per < p.T ? begin + per : p.T};
}

// block_counts[e][b] = the pairs of CTA b's tokens routed to expert e.
__global__ void __launch_bounds__(kCountThreads) token_route_count(TokenRouteParams p) {
  extern __shared__ int32_t hist[];  // [E]
  const int tid = int(threadIdx.x);
  for (int e = tid; e < p.E; e += kCountThreads) hist[e] = 0;
  __syncthreads();
  const TokenRange r = block_tokens(p);
  // A thread a pair: consecutive threads read consecutive ids.
  for (int64_t q = int64_t(r.begin) * p.k + tid; q < int64_t(r.end) * p.k; q += kCountThreads) {
    const int t = int(q / p.k), j = int(q % p.k);
    int kind = 0;
    const int e = routed_expert(p, t, j, kind);
    if (e >= 0)
      atomicAdd(&hist[e], 1);  // a count: the order of the adds does not matter
    else
      record_error(p.error, kind, t, j, load_id(p, q), p.E);
  }
  __syncthreads();
  for (int e = tid; e < p.E; e += kCountThreads) p.block_counts[int64_t(e) * p.blocks + blockIdx.x] = hist[e];
}

// Every CTA: its first row of each expert (every CTA scans the B x E counts
// itself, at most 128 x 1024 ints read from L2, which costs less than a
// grid-wide barrier or a third kernel); its pairs' rows in a fixed order
// (token step, slot, warp, lane); then its token rows copied to x_perm.
__global__ void __launch_bounds__(kScatterThreads) token_route_scatter(TokenRouteParams p) {
  extern __shared__ int32_t smem[];
  __shared__ int32_t scan_tmp[32];
  const int E = p.E, B = p.blocks, b = int(blockIdx.x);
  int32_t* next_row = smem;                // [E + 1]: this CTA's next row of each expert
  int32_t* start = next_row + (E + 1);     // [E + 1]: the first row of each expert (scanned in place)
  int32_t* warp_count = start + (E + 1);   // [kRankWarps][E]: a step's pairs of each warp and expert
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;

  for (int e = tid; e < E; e += kScatterThreads) {
    const int32_t* c = p.block_counts + int64_t(e) * B;
    int32_t all = 0, before = 0;
#pragma unroll 8
    for (int i = 0; i < B; ++i) {
      const int32_t v = c[i];
      all += v;
      before += i < b ? v : 0;
    }
    start[e] = all;
    next_row[e] = before;
  }
  for (int i = tid; i < kRankWarps * E; i += kScatterThreads) warp_count[i] = 0;
  __syncthreads();
  cta_exclusive_scan(start, E, scan_tmp, [](const int32_t* a) { return *a; });
  for (int e = tid; e < E; e += kScatterThreads) {
    if (b == 0) p.offs[e] = start[e + 1];  // expert e's cumulative end
    next_row[e] += start[e];
  }
  __syncthreads();

  const TokenRange r = block_tokens(p);
  for (int t0 = r.begin; t0 < r.end; t0 += kRankThreads) {  // uniform over the CTA
    const int t = t0 + tid;
    const bool mine = tid < kRankThreads && t < r.end;
    for (int j = 0; j < p.k; ++j) {
      int kind = 0;
      const int e = mine ? routed_expert(p, t, j, kind) : -1;
      int rank = 0;
      if (warp < kRankWarps) {
        const unsigned peers = __match_any_sync(~0u, e);
        rank = __popc(peers & ((1u << lane) - 1u));
        if (e >= 0 && rank == 0) warp_count[warp * E + e] = __popc(peers);
      }
      __syncthreads();
      if (mine) {
        const int64_t q = int64_t(t) * p.k + j;
        if (e >= 0) {
          int32_t row = next_row[e] + rank;
          for (int w = 0; w < warp; ++w) row += warp_count[w * E + e];
          p.pos[q] = row;
          p.row_weight[row] = load_weight(p, q);
        } else {
          p.pos[q] = -1;
        }
      }
      __syncthreads();
      for (int x = tid; x < E; x += kScatterThreads) {
        int32_t step = 0;
#pragma unroll
        for (int w = 0; w < kRankWarps; ++w) {
          step += warp_count[w * E + x];
          warp_count[w * E + x] = 0;
        }
        next_row[x] += step;
      }
      __syncthreads();
    }
  }

  // The barrier above makes this CTA's pos stores visible to all of its threads.
  const int vecs = p.H / 8;
  const uint16_t* x = static_cast<const uint16_t*>(p.x);
  uint16_t* x_perm = static_cast<uint16_t*>(p.x_perm);
  for (int64_t q = int64_t(r.begin) * p.k + warp; q < int64_t(r.end) * p.k; q += kScatterThreads / 32) {
    const int32_t row = p.pos[q];
    if (row < 0) continue;  // uniform over the warp
    warp_copy_row(reinterpret_cast<const uint4*>(x + (q / p.k) * p.H), reinterpret_cast<uint4*>(x_perm + int64_t(row) * p.H),
                  vecs, lane);
  }
}

}  // namespace

int launch_token_route(const TokenRouteParams& p, cudaStream_t stream) {
  const size_t count_smem = size_t(p.E) * sizeof(int32_t);
  token_route_count<<<unsigned(p.blocks), kCountThreads, count_smem, stream>>>(p);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return int(e);
  const size_t scatter_smem = (2 * size_t(p.E + 1) + size_t(kRankWarps) * p.E) * sizeof(int32_t);  // <= 41 KB
  token_route_scatter<<<unsigned(p.blocks), kScatterThreads, scatter_smem, stream>>>(p);
  return int(cudaGetLastError());
}

}  // namespace xstage::moe
