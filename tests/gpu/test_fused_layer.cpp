// The fused MoE expert layer kernel alone (src/device/moe/fused_layer_sm90.cuh)
// against the grouped GEMMs it fuses (L1 with SwiGLU and routing weights, then
// L2), which run the same tiles in the same accumulation order: h and every
// output row must match bit for bit, under every schedule and tile, with
// empty experts, ragged ones and pool rows past the last expert. The remote
// epilogue's rows land at their (rank, slot); slots no row names stay
// poisoned; the done flags hold the epoch; each launch leaves the counters
// zeroed for the next (so every case runs twice). With the dispatch's wait
// failed the kernel writes nothing and publishes no flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "device/fill/fill_random.hpp"
#include "device/moe/fused_layer_launch.hpp"
#include "gpu/need_gpus.hpp"
#include "xstage/moe/moe.hpp"

using namespace xstage;

namespace {

#define CK(x) ASSERT_EQ((x), cudaSuccess)

struct Case {
  int hidden, inter;
  std::vector<int> counts;
  int extra_rows;  // pool rows past the last expert
};

template <class T>
T* dev(size_t n) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
  return p;
}

std::vector<uint16_t> get(const void* d, size_t n) {
  std::vector<uint16_t> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// pull: the kernel copies the pool's rows from two ranks' send buffers
// itself (x_send), the row of pool row r at rank r % 2, token = its slot.
void run_case(const Case& c, int fused_tile, int schedule, float share, int lag, bool pull = false) {
  const int E = int(c.counts.size());
  const int rows = std::accumulate(c.counts.begin(), c.counts.end(), 0);
  const int rows_cap = rows + c.extra_rows;
  const int H = c.hidden, I = c.inter;
  std::vector<int32_t> offs(E);
  std::partial_sum(c.counts.begin(), c.counts.end(), offs.begin());

  auto* x = dev<uint16_t>(size_t(rows_cap) * H);
  auto* w13 = dev<uint16_t>(size_t(E) * 2 * I * H);
  auto* w2 = dev<uint16_t>(size_t(E) * H * I);
  auto* h_ref = dev<uint16_t>(size_t(rows_cap) * I);
  auto* y_ref = dev<uint16_t>(size_t(rows_cap) * H);
  auto* h = dev<uint16_t>(size_t(rows_cap) * I);
  auto* out = dev<uint16_t>(size_t(rows_cap) * H);
  auto* d_offs = dev<int32_t>(E);
  auto* weight = dev<float>(rows_cap);
  CK(fill::launch_fill_random_bf16(x, size_t(rows_cap) * H, 5, 0, 0, nullptr));
  CK(fill::launch_fill_random_bf16(w13, size_t(E) * 2 * I * H, 5, 1, 0, nullptr));
  CK(fill::launch_fill_random_bf16(w2, size_t(E) * H * I, 5, 2, 0, nullptr));
  CK(cudaMemcpy(d_offs, offs.data(), E * 4, cudaMemcpyHostToDevice));
  std::mt19937 rng(7);
  std::vector<float> wts(rows_cap);
  for (float& w : wts) w = std::uniform_real_distribution<float>(0.1f, 1.f)(rng);
  CK(cudaMemcpy(weight, wts.data(), rows_cap * 4, cudaMemcpyHostToDevice));

  // Destinations: two ranks' combine buffers of `slots` rows; row r goes to
  // rank r % 2 at a slot from a permutation.
  const int slots = rows_cap + 3;
  std::vector<int32_t> dest_rank(rows_cap), dest_slot(rows_cap);
  std::vector<int32_t> perm(slots);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int r = 0; r < rows_cap; ++r) dest_rank[r] = r % 2, dest_slot[r] = perm[r];
  uint16_t* send[2] = {nullptr, nullptr};
  auto* d_send = dev<void*>(2);
  uint16_t* pool = x;  // what the fused kernel reads (and, with pull, writes)
  if (pull) {
    // The reference pool (x) from the send buffers, row by row.
    for (int k = 0; k < 2; ++k) {
      send[k] = dev<uint16_t>(size_t(slots) * H);
      CK(fill::launch_fill_random_bf16(send[k], size_t(slots) * H, 6, uint64_t(k), 0, nullptr));
    }
    for (int r = 0; r < rows_cap; ++r)
      CK(cudaMemcpy(x + size_t(r) * H, send[dest_rank[r]] + size_t(dest_slot[r]) * H, size_t(H) * 2,
                    cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy(d_send, send, sizeof(send), cudaMemcpyHostToDevice));
    pool = dev<uint16_t>(size_t(rows_cap) * H);
  }
  // The reference: the grouped GEMMs with the same tile, one split.
  const MoeTile tile = fused_tile == moe::kFusedM128N256 ? MoeTile::m128n256 : MoeTile::m64n256;
  CK(cudaMemset(h_ref, 0, size_t(rows_cap) * I * 2));
  MoeGemmArgs l1{MoeGemmKind::l1_swiglu, x, w13, h_ref, d_offs, weight, rows, H, 2 * I, E, tile, 1};
  l1.out_store = MoeOutStore::warp_staged;
  moe_gemm(l1);
  MoeGemmArgs l2{MoeGemmKind::l2, h_ref, w2, y_ref, d_offs, nullptr, rows, I, H, E, tile, 1};
  l2.out_store = MoeOutStore::warp_staged;
  moe_gemm(l2);
  CK(cudaDeviceSynchronize());
  const auto h_want = get(h_ref, size_t(rows) * I), y_want = get(y_ref, size_t(rows) * H);

  auto* d_rank = dev<int32_t>(rows_cap);
  auto* d_slot = dev<int32_t>(rows_cap);
  CK(cudaMemcpy(d_rank, dest_rank.data(), rows_cap * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_slot, dest_slot.data(), rows_cap * 4, cudaMemcpyHostToDevice));
  void* comb[2] = {dev<uint16_t>(size_t(slots) * H), dev<uint16_t>(size_t(slots) * H)};
  auto* d_comb = dev<void*>(2);
  CK(cudaMemcpy(d_comb, comb, sizeof(comb), cudaMemcpyHostToDevice));
  uint64_t* flag_mem[2] = {dev<uint64_t>(8), dev<uint64_t>(8)};
  auto* d_flags = dev<uint64_t*>(2);
  CK(cudaMemcpy(d_flags, flag_mem, sizeof(flag_mem), cudaMemcpyHostToDevice));
  CK(cudaMemset(flag_mem[0], 0, 64));
  CK(cudaMemset(flag_mem[1], 0, 64));
  auto* counters = dev<int32_t>(moe::fused_layer_counter_ints(E, rows_cap));
  CK(cudaMemset(counters, 0, moe::fused_layer_counter_ints(E, rows_cap) * 4));
  auto* record = dev<remote::FlagTimeoutRecord>(1);
  CK(cudaMemset(record, 0, sizeof(remote::FlagTimeoutRecord)));

  moe::FusedLayerParams p;
  p.x_pool = pool, p.h = h, p.w13 = w13, p.w2 = w2, p.offs = d_offs, p.row_weight = weight;
  p.row_dest_rank = d_rank, p.row_dest_slot = d_slot;
  p.rows_cap = rows_cap, p.hidden = H, p.inter = I, p.E_run = E;
  p.schedule = schedule, p.l2_share = share, p.lag_tiles = lag;
  p.counters = counters, p.timeout_record = record, p.timeout_ns = 5'000'000'000ull;
  p.flags = d_flags, p.done_flag = 2, p.rank0 = 0, p.local_ranks = 2, p.world = 2;
  if (pull) p.x_send = d_send, p.T_max = slots;

  for (int remote = 0; remote < 2; ++remote)
    for (int run = 0; run < 2; ++run) {
      SCOPED_TRACE(testing::Message() << "remote " << remote << " run " << run << " schedule " << schedule
                                      << " tile " << fused_tile);
      CK(cudaMemset(h, 0xff, size_t(rows_cap) * I * 2));
      if (pull) CK(cudaMemset(pool, 0xff, size_t(rows_cap) * H * 2));
      CK(cudaMemset(out, 0xff, size_t(rows_cap) * H * 2));
      CK(cudaMemset(comb[0], 0xff, size_t(slots) * H * 2));
      CK(cudaMemset(comb[1], 0xff, size_t(slots) * H * 2));
      p.combine = remote ? d_comb : nullptr;
      p.out_pool = remote ? nullptr : out;
      p.epoch = uint64_t(10 + 2 * remote + run);
      ASSERT_EQ(moe::launch_fused_layer(p, fused_tile, nullptr), 0);
      CK(cudaDeviceSynchronize());
      remote::FlagTimeoutRecord rec;
      CK(cudaMemcpy(&rec, record, sizeof(rec), cudaMemcpyDeviceToHost));
      ASSERT_EQ(rec.set, 0u) << "expert " << rec.flag << " waited for " << rec.expected << " tiles, saw " << rec.seen;
      std::vector<int32_t> ctr(moe::fused_layer_counter_ints(E, rows_cap));
      CK(cudaMemcpy(ctr.data(), counters, ctr.size() * 4, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < ctr.size(); ++i) ASSERT_EQ(ctr[i], 0) << "counter " << i << " not reset";
      if (pull) {
        const auto pool_got = get(pool, size_t(rows) * H), pool_want = get(x, size_t(rows) * H);
        ASSERT_EQ(0, std::memcmp(pool_got.data(), pool_want.data(), pool_want.size() * 2)) << "copied rows";
      }
      const auto h_got = get(h, size_t(rows) * I);
      ASSERT_EQ(0, std::memcmp(h_got.data(), h_want.data(), h_want.size() * 2)) << "h differs from the grouped L1";
      if (!remote) {
        const auto y_got = get(out, size_t(rows_cap) * H);
        ASSERT_EQ(0, std::memcmp(y_got.data(), y_want.data(), y_want.size() * 2)) << "L2 differs";
        for (size_t i = y_want.size(); i < y_got.size(); ++i) ASSERT_EQ(y_got[i], 0xffff) << "pool row past the experts";
      } else {
        const std::vector<uint16_t> cg[2] = {get(comb[0], size_t(slots) * H), get(comb[1], size_t(slots) * H)};
        std::vector<char> named(2 * size_t(slots), 0);
        for (int r = 0; r < rows; ++r) {
          named[dest_rank[r] * size_t(slots) + dest_slot[r]] = 1;
          ASSERT_EQ(0, std::memcmp(cg[dest_rank[r]].data() + size_t(dest_slot[r]) * H, y_want.data() + size_t(r) * H,
                                   size_t(H) * 2))
              << "row " << r;
        }
        for (int k = 0; k < 2; ++k)
          for (int s = 0; s < slots; ++s)
            if (!named[k * size_t(slots) + s]) ASSERT_EQ(cg[k][size_t(s) * H], 0xffff) << "rank " << k << " slot " << s;
        uint64_t fl[2][8];
        CK(cudaMemcpy(fl[0], flag_mem[0], 64, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(fl[1], flag_mem[1], 64, cudaMemcpyDeviceToHost));
        for (int d = 0; d < 2; ++d)
          for (int s = 0; s < 2; ++s) ASSERT_EQ(fl[d][2 + s], p.epoch) << "done flag of rank " << s << " at " << d;
      }
    }
  if (pull) {
    // The dispatch's wait failed: the kernel must leave every output and
    // flag as it was (another rank would otherwise sum this rank's rows of
    // the last plan as if they were this run's).
    SCOPED_TRACE(testing::Message() << "pull failed, schedule " << schedule << " tile " << fused_tile);
    auto* pull_rec = dev<remote::FlagTimeoutRecord>(1);
    CK(cudaMemset(pull_rec, 0, sizeof(remote::FlagTimeoutRecord)));
    const unsigned int one = 1;
    CK(cudaMemcpy(&pull_rec->set, &one, sizeof one, cudaMemcpyHostToDevice));
    CK(cudaMemset(h, 0xff, size_t(rows_cap) * I * 2));
    CK(cudaMemset(pool, 0xff, size_t(rows_cap) * H * 2));
    CK(cudaMemset(comb[0], 0xff, size_t(slots) * H * 2));
    CK(cudaMemset(comb[1], 0xff, size_t(slots) * H * 2));
    uint64_t before[2][8];
    CK(cudaMemcpy(before[0], flag_mem[0], 64, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(before[1], flag_mem[1], 64, cudaMemcpyDeviceToHost));
    p.combine = d_comb, p.out_pool = nullptr, p.epoch = 99, p.pull_record = pull_rec;
    ASSERT_EQ(moe::launch_fused_layer(p, fused_tile, nullptr), 0);
    CK(cudaDeviceSynchronize());
    for (const auto& v : {get(h, size_t(rows_cap) * I), get(pool, size_t(rows_cap) * H), get(comb[0], size_t(slots) * H),
                          get(comb[1], size_t(slots) * H)})
      ASSERT_TRUE(std::all_of(v.begin(), v.end(), [](uint16_t e) { return e == 0xffff; })) << "an output was written";
    uint64_t after[2][8];
    CK(cudaMemcpy(after[0], flag_mem[0], 64, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(after[1], flag_mem[1], 64, cudaMemcpyDeviceToHost));
    ASSERT_EQ(0, std::memcmp(before, after, sizeof before)) << "a done flag was published";
    std::vector<int32_t> ctr(moe::fused_layer_counter_ints(E, rows_cap));
    CK(cudaMemcpy(ctr.data(), counters, ctr.size() * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < ctr.size(); ++i) ASSERT_EQ(ctr[i], 0) << "counter " << i << " moved";
    cudaFree(pull_rec);
    p.pull_record = nullptr;
  }
  for (void* q : {(void*)x, (void*)w13, (void*)w2, (void*)h_ref, (void*)y_ref, (void*)h, (void*)out, (void*)d_offs,
                  (void*)weight, (void*)d_rank, (void*)d_slot, comb[0], comb[1], (void*)d_comb, (void*)flag_mem[0],
                  (void*)flag_mem[1], (void*)d_flags, (void*)counters, (void*)record, (void*)send[0], (void*)send[1],
                  (void*)d_send})
    cudaFree(q);
  if (pool != x) cudaFree(pool);
}

const Case kSmall{512, 256, {0, 77, 130, 1, 0, 256, 3}, 50};
const Case kWide{1024, 768, {200, 0, 129, 64, 300}, 7};  // L1 6 n-blocks, L2 4

TEST(FusedLayer, ExpertWaveMatchesTheGroupedGemms) {
  XSTAGE_NEED_GPUS(1);
  for (int tile : {moe::kFusedM128N256, moe::kFusedM64N256}) {
    run_case(kSmall, tile, moe::kScheduleExpertWave, 0.f, 0);
    run_case(kWide, tile, moe::kScheduleExpertWave, 0.f, 0);
  }
}

TEST(FusedLayer, ShareSchedulesMatchTheGroupedGemms) {
  XSTAGE_NEED_GPUS(1);
  for (int tile : {moe::kFusedM128N256, moe::kFusedM64N256})
    for (float share : {0.f, 0.1f, 0.9f})
      for (int lag : {0, 3, 1000}) {
        run_case(kSmall, tile, moe::kScheduleShare, share, lag);
        run_case(kWide, tile, moe::kScheduleShare, share, lag);
      }
}

// The dispatch's row copies inside the kernel, under each schedule.
TEST(FusedLayer, RowsCopiedInTheKernelMatchTheGroupedGemms) {
  XSTAGE_NEED_GPUS(1);
  for (int tile : {moe::kFusedM128N256, moe::kFusedM64N256}) {
    run_case(kSmall, tile, moe::kScheduleExpertWave, 0.f, 0, true);
    run_case(kWide, tile, moe::kScheduleShare, 0.f, 3, true);
    run_case(kWide, tile, moe::kScheduleShare, 0.f, 0, true);
  }
  run_case(Case{256, 128, {0, 0, 0}, 5}, moe::kFusedM128N256, moe::kScheduleShare, 0.f, 4, true);
}

// Nothing to compute: the launch still runs (one CTA) and publishes its flags.
TEST(FusedLayer, NoRowsStillPublishes) {
  XSTAGE_NEED_GPUS(1);
  run_case(Case{256, 128, {0, 0, 0}, 5}, moe::kFusedM128N256, moe::kScheduleShare, 0.f, 4);
}

}  // namespace
