// Dispatch, step 1 (route): every source tells every expert's owner which of
// its (token, slot) pairs go there, in token order, and how many.
//
// One CTA per (global expert e, source s) scans all of s's pairs: the order
// of a CTA's output is fixed by a ballot prefix over token order (no atomics
// decide positions), so the pool, and with it every row's place in the
// GEMMs, is the same on every run. Reading s's ids once per expert is cheap
// next to the layer (the ids fit in L2), and it needs no cross-CTA prefix.
//
// The CTA's stores go straight into the owner's symmetric areas (routes,
// counts). The last CTA of a source to finish (an atomic count) releases
// flag_counts(s) on every rank at system scope: each CTA fences before it
// counts itself in, and the last one fences after, so every CTA's remote
// stores precede the flags (the usual fence / atomic / fence chain).
#include "device/moe/layer_comm_launch.hpp"
#include "device/moe/layer_device.cuh"
#include "device/remote/publish.cuh"

namespace xstage::moe {

namespace {

constexpr int kRouteThreads = 256;
constexpr int kRouteWarps = kRouteThreads / 32;

__device__ void record_input_error(RouteInputError* r, int kind, int rank, int token, int slot, int id) {
  if (r != nullptr && atomicCAS(&r->set, 0u, 1u) == 0u)
    r->kind = kind, r->rank = rank, r->token = token, r->slot = slot, r->id = id;
}

__global__ void __launch_bounds__(kRouteThreads) sm90_moe_route(RouteParams p) {
  __shared__ int32_t warp_count[32];
  __shared__ int last;
  const int e = int(blockIdx.x), li = int(blockIdx.y), s = p.rank0 + li;
  const int k = p.k, T = p.tokens[li];
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int64_t pairs_base = int64_t(li) * p.T_max * k;
  const int32_t* ids = p.topk_ids + pairs_base;
  const float* weights = p.topk_weights + pairs_base;
  int32_t* pos = p.pos + pairs_base;
  const int owner = e / p.E_loc, e_loc = e % p.E_loc;
  const int64_t area = int64_t(p.P) * p.E_loc * p.T_max;  // int32 entries of the index array
  const int64_t seg = (int64_t(s) * p.E_loc + e_loc) * p.T_max;
  int32_t* route_idx = static_cast<int32_t*>(p.routes[owner]) + seg;
  float* route_w = reinterpret_cast<float*>(static_cast<int32_t*>(p.routes[owner]) + area) + seg;

  int32_t base = 0;  // pairs of this (source, expert) so far, in token order
  for (int t0 = 0; t0 < T; t0 += kRouteThreads) {
    const int t = t0 + int(threadIdx.x);
    int slot = -1;
    if (t < T) {
      const auto look = [&](int id, int j) {
        if (id == e) {
          if (slot < 0)
            slot = j;
          else {  // the first slot keeps the pair; the host reports the input
            record_input_error(p.input_error, kRouteIdRepeated, s, t, j, id);
            pos[int64_t(t) * k + j] = -1;  // routed nowhere: the unfused combine skips it (only CTA e sees this pair)
          }
        }
        if (e == 0 && (id < 0 || id >= p.E)) record_input_error(p.input_error, kRouteIdOutOfRange, s, t, j, id);
      };
      const int32_t* row = ids + int64_t(t) * k;
      if (k % 4 == 0) {  // 16-byte loads: the arrays are 16-byte aligned and a token's ids too
        for (int j = 0; j < k; j += 4) {
          const int4 v = *reinterpret_cast<const int4*>(row + j);
          look(v.x, j), look(v.y, j + 1), look(v.z, j + 2), look(v.w, j + 3);
        }
      } else {
        for (int j = 0; j < k; ++j) look(row[j], j);
      }
    }
    const unsigned ballot = __ballot_sync(~0u, slot >= 0);
    if (lane == 0) warp_count[warp] = __popc(ballot);
    __syncthreads();
    int32_t before = 0, chunk = 0;
#pragma unroll
    for (int w = 0; w < kRouteWarps; ++w) {
      before += w < warp ? warp_count[w] : 0;
      chunk += warp_count[w];
    }
    if (slot >= 0) {
      const int32_t i = base + before + __popc(ballot & ((1u << lane) - 1u));
      const int64_t pair = int64_t(t) * k + slot;
      route_idx[i] = int32_t(pair);
      route_w[i] = weights[pair];
      pos[pair] = i;
    }
    base += chunk;
    __syncthreads();  // warp_count is rewritten by the next chunk
  }

  int32_t* send_base = p.send_base + int64_t(li) * (p.E + 1);
  if (threadIdx.x == 0) {
    static_cast<int32_t*>(p.counts[owner])[int64_t(s) * p.E_loc + e_loc] = base;
    send_base[e] = base;       // the count for now; the last CTA turns them into prefix sums
    ptx::fence_acq_rel_sys();  // release: this CTA's stores (ordered by the barrier above) before its count
    last = atomicAdd(p.done_ctas + li, 1) == p.E - 1;
    if (last) {
      ptx::fence_acq_rel_sys();  // acquire: every other CTA's stores
      p.done_ctas[li] = 0;       // ready for the next launch (stream order)
    }
  }
  __syncthreads();
  if (!last) return;
  // send_base[0 .. E) hold every expert's count: other CTAs wrote them (to
  // L2, not this SM's L1), so the scan reads them through L2.
  cta_exclusive_scan(send_base, p.E, warp_count, [](const int32_t* q) { return __ldcg(q); });
  // Every rank may now read this source's routes and counts.
  const uint64_t epoch = run_epoch(p.epoch_at, p.epoch);
  for (int r = int(threadIdx.x); r < p.P; r += kRouteThreads)
    remote::publish_flag(p.flags, r, layer_flag_counts(s), epoch);
}

}  // namespace

int preload_moe_route() {
  cudaFuncAttributes a;
  return int(cudaFuncGetAttributes(&a, sm90_moe_route));
}

int launch_moe_route(const RouteParams& p, cudaStream_t stream) {
  sm90_moe_route<<<dim3(unsigned(p.E), unsigned(p.n)), kRouteThreads, 0, stream>>>(p);
  return int(cudaGetLastError());
}

}  // namespace xstage::moe
