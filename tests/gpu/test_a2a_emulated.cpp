// The Ulysses all-to-all on the emulated backend (P ranks on one GPU), both
// directions, device and host destinations, copy engine and store kernel:
// bit-exact against the CPU reference, destinations poisoned first. And the
// flag timeout, fired on purpose through the command.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <sstream>

#include "cli_runner.hpp"
#include "gpu/need_gpus.hpp"
#include "xstage/comm/a2a.hpp"
#include "xstage/core/device.hpp"

using namespace xstage;

namespace {

struct Case {
  int P;
  Placement placement;
  A2aVersion version;
  A2aDirection direction;
};

std::string case_name(const testing::TestParamInfo<Case>& i) {
  std::string n = "P" + std::to_string(i.param.P) + "_" + to_string(i.param.placement) + "_" +
                  to_string(i.param.version) + "_" + to_string(i.param.direction);
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (int P : {2, 4, 8})
    for (Placement pl : {Placement::device, Placement::host})
      for (A2aVersion v : {A2aVersion::copy_engine, A2aVersion::store_kernel})
        for (A2aDirection d : {A2aDirection::seq_to_heads, A2aDirection::heads_to_seq}) out.push_back({P, pl, v, d});
  return out;
}

// Shapes that are multiples of nothing: uneven S (ranks with fewer rows, or
// none), pieces of 16-byte multiples (the fast path) and of 28 and 5 bytes
// (the narrow paths).
std::vector<UlyssesShape> shapes(int P) {
  return {
      {2, 5 * P + 3, 3 * P, 128, P, 2},  // bf16, 16-byte pieces
      {1, P - 1, 2 * P, 7, P, 2},        // fewer rows than ranks; 28-byte pieces
      {3, 37, P, 5, P, 1},               // byte elements, 5-byte pieces
      {1, 1000 * P + 1, P, 64, P, 2},    // large enough for many warps per rank pair
  };
}

class A2aEmulated : public testing::TestWithParam<Case> {};

TEST_P(A2aEmulated, BitExactAgainstTheCpuReference) {
  XSTAGE_NEED_GPUS(1);
  const Case c = GetParam();
  auto world = World::create({Backend::emulated, c.P, c.placement, 0});
  size_t capacity = 0;
  for (const auto& s : shapes(c.P)) capacity = std::max(capacity, UlyssesLayout(s).max_shard_bytes());
  capacity += 4096;  // room past every shard, to catch writes past its end
  const A2aBuffers bufs = alloc_a2a_buffers(*world, capacity);

  uint64_t seed = 1000 * c.P + 100 * static_cast<int>(c.placement) + 10 * static_cast<int>(c.version) +
                  static_cast<int>(c.direction);
  for (const auto& s : shapes(c.P)) {
    const UlyssesLayout l(s);
    SCOPED_TRACE("B=" + std::to_string(s.B) + " S=" + std::to_string(s.S) + " H=" + std::to_string(s.H) +
                 " D=" + std::to_string(s.D) + " e=" + std::to_string(s.elem_bytes));
    ++seed;
    RankBuffers in(c.P);
    const std::vector<uint8_t> poison(capacity, 0xFF);
    for (int r = 0; r < c.P; ++r) {
      in[r] = random_shard(l.src_shard_bytes(c.direction, r), seed, r);
      ASSERT_EQ(cudaMemcpy(bufs.input[r], in[r].data(), in[r].size(), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(bufs.output->ptrs[r], poison.data(), capacity, cudaMemcpyDefault), cudaSuccess);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // pageable copies may still be in flight

    A2aOp op(*world, bufs, l, c.direction, c.version);
    world->fork();
    op.enqueue();
    world->join();
    world->barrier();

    const RankBuffers want = reference_all_to_all(l, c.direction, in);
    for (int r = 0; r < c.P; ++r) {
      std::vector<uint8_t> got(capacity);
      ASSERT_EQ(cudaMemcpy(got.data(), bufs.output->ptrs[r], capacity, cudaMemcpyDefault), cudaSuccess);
      const size_t n = want[r].size();
      const auto first_bad = std::mismatch(want[r].begin(), want[r].end(), got.begin());
      EXPECT_TRUE(first_bad.first == want[r].end())
          << "rank " << r << " differs at byte " << (first_bad.first - want[r].begin()) << " of " << n;
      EXPECT_TRUE(std::all_of(got.begin() + n, got.end(), [](uint8_t x) { return x == 0xFF; }))
          << "rank " << r << ": bytes written past the end of its " << n << "-byte shard";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllCases, A2aEmulated, testing::ValuesIn(all_cases()), case_name);

TEST(A2aEmulatedCheck, LibraryCheckPassesAndBenchRuns) {
  XSTAGE_NEED_GPUS(1);
  const CliRun r = run_cli("a2a --ranks 4 --heads 8 --head-dim 64 -b 100K -e 1M -f 4 -n 3 -w 1 --check --csv "
                           "--placement host");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("version,direction,placement,backend,ranks,B,S,H,D,bytes,time_us,algbw_GBps,busbw_GBps"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("copy-engine-d2h,d2h,host"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("store-kernel,heads-to-seq,host"), std::string::npos) << r.out;
  std::istringstream lines(r.out);
  int checked = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("copy-engine,", 0) != 0 && line.rfind("store-kernel,", 0) != 0) continue;
    EXPECT_EQ(line.substr(line.size() - 3), ",ok") << line;
    ++checked;
  }
  EXPECT_EQ(checked, 2 * 2 * 2) << r.out;  // 2 sizes x 2 versions x 2 directions
}

TEST(FlagTimeout, FiresWithRankFlagExpectedAndSeen) {
  XSTAGE_NEED_GPUS(1);
  const CliRun r = run_cli("selftest flag-timeout --timeout 50ms --rank 2 --flag 5");
  EXPECT_EQ(r.rc, 2) << r.out;
  // The host's report of the record the kernel left: who waited, for what, what it saw.
  EXPECT_NE(r.out.find("rank 2 waited on flag 5 for "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("expected >= 1, saw 0 (block 0, thread 0)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("timed out as designed"), std::string::npos) << r.out;
  // The kernel ended normally: no trap, so nothing of the CUDA error machinery in the message.
  EXPECT_EQ(r.out.find("unspecified launch failure"), std::string::npos) << r.out;
}

}  // namespace
