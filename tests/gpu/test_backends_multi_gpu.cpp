// The peer and nccl backends, ready for the multi-GPU issue: both skip with
// fewer than two GPUs. peer runs in this process (rank r on GPU r); nccl
// starts one process per GPU through `xstage launch`.
#include <gtest/gtest.h>

#include <sstream>

#include "cli_runner.hpp"
#include "gpu/need_gpus.hpp"
#include "xstage/comm/a2a.hpp"
#include "xstage/core/device.hpp"

using namespace xstage;

namespace {
int ranks_for_test() { return std::min(cuda_device_count(), 8); }
}  // namespace

TEST(PeerBackend, EveryVersionBitExactBothDirectionsAndPlacements) {
  XSTAGE_NEED_GPUS(2);
  const int P = ranks_for_test();
  for (Placement pl : {Placement::device, Placement::host}) {
    auto world = World::create({Backend::peer, P, pl, 0});
    const std::vector<UlyssesShape> shapes = {{2, 7 * P + 5, 3 * P, 128, P, 2}, {1, P - 1, P, 12, P, 2}};
    size_t capacity = 0;
    for (const auto& s : shapes) capacity = std::max(capacity, UlyssesLayout(s).max_shard_bytes() + 4096);
    const A2aBuffers bufs = alloc_a2a_buffers(*world, capacity);
    uint64_t seed = 77;
    for (const auto& s : shapes)
      for (A2aVersion v : available_versions(Backend::peer))
        for (A2aDirection d : {A2aDirection::seq_to_heads, A2aDirection::heads_to_seq}) {
          const UlyssesLayout l(s);
          A2aOp op(*world, bufs, l, d, v);
          EXPECT_EQ(check_a2a(*world, bufs, op, l, d, ++seed), "")
              << to_string(pl) << " " << to_string(v) << " " << to_string(d) << " S=" << s.S;
        }
  }
}

TEST(PeerBackend, SweepRunsEveryVersionChecked) {
  XSTAGE_NEED_GPUS(2);
  const int P = ranks_for_test();
  const CliRun r = run_cli("a2a --backend peer --ranks " + std::to_string(P) + " --heads " + std::to_string(3 * P) +
                           " -b 1M -e 4M -n 3 -w 1 --check --csv");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("store-kernel,seq-to-heads,device,peer"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(",-\n"), std::string::npos) << "a row went unchecked\n" << r.out;
}

TEST(NcclBackend, LaunchedProcessesRunEveryVersionChecked) {
  XSTAGE_NEED_GPUS(2);
#ifndef XSTAGE_HAVE_NCCL
  GTEST_SKIP() << "built without NCCL";
#endif
  const int P = ranks_for_test();
  // B = 2 and 3P heads: S comes out uneven over P at these sizes (85 rows for P = 8 at 1 MiB).
  const CliRun r = run_cli("launch -n " + std::to_string(P) + " -- " + xstage_cli_path() + " a2a --backend nccl --heads " +
                           std::to_string(3 * P) + " --batch 2 -b 1M -e 4M -n 3 -w 1 --check --csv");
  ASSERT_EQ(r.rc, 0) << r.out;
  std::istringstream lines(r.out);
  int nccl_rows = 0, checked = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find(",nccl,") == std::string::npos) continue;
    ++nccl_rows;
    checked += line.size() >= 3 && line.substr(line.size() - 3) == ",ok";
  }
  EXPECT_EQ(nccl_rows, 3 * 3 * 2) << r.out;  // 3 sizes x 3 versions x 2 directions, printed by rank 0 only
  EXPECT_EQ(checked, nccl_rows) << r.out;
}
