// The communication layer's commands where no GPU is needed: a2a's argument
// checks (they run before the GPU check), xstage launch, and clear errors.
#include <gtest/gtest.h>

#include <chrono>

#include "cli_runner.hpp"
#include "xstage/comm/world.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"

namespace {
void expect_error(const std::string& args, const std::string& fragment) {
  const CliRun r = run_cli(args);
  EXPECT_NE(r.rc, 0) << args << "\n" << r.out;
  EXPECT_NE(r.out.find(fragment), std::string::npos) << args << "\n" << r.out;
  EXPECT_EQ(r.out.find("internal error"), std::string::npos) << args << "\n" << r.out;
}
}  // namespace

TEST(CommCli, A2aRejectsBadArgumentsBeforeLookingForAGpu) {
  expect_error("a2a --ranks 0", "--ranks: expected a whole number >= 1, got 0");
  expect_error("a2a --ranks 8 --heads 30", "H = 30 must divide by the ranks P = 8");
  expect_error("a2a --heads 0", "heads H must be >= 1");
  expect_error("a2a --backend mpi", "--backend: expected emulated, peer or nccl");
  expect_error("a2a --placement disk", "--placement: expected device or host");
  expect_error("a2a -f 1", "-f/--stepfactor: expected a factor > 1");
  expect_error("a2a -b 2M -e 1M", "is above -e/--maxbytes");
  expect_error("a2a -b 0", "-b/--minbytes");
  expect_error("a2a -n 0", "-n/--iters");
  expect_error("a2a --versions nccl", "needs --backend nccl");
  expect_error("a2a --versions dma", "--versions: expected copy-engine, store-kernel or nccl");
  expect_error("a2a --directions sideways", "direction: expected seq-to-heads");
  expect_error("a2a --backend nccl --placement host", "--placement host");
}

TEST(CommCli, A2aWithoutAGpuSaysSoOnOneLine) {
  if (xstage::cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present";
  const CliRun r = run_cli("a2a -b 1M -e 1M");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("no CUDA GPU visible"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  const CliRun s = run_cli("selftest flag-timeout --timeout 10ms");
  EXPECT_EQ(s.rc, 2) << s.out;
  EXPECT_NE(s.out.find("no CUDA GPU visible"), std::string::npos) << s.out;
}

TEST(CommCli, LaunchSetsTheTorchrunVariables) {
  const CliRun r = run_cli("launch -n 3 -- sh -c 'echo \"R=$RANK/$WORLD_SIZE/$LOCAL_RANK nvls=$NCCL_NVLS_ENABLE "
                           "id=${XSTAGE_NCCL_ID_FILE:+set}\"'");
  ASSERT_EQ(r.rc, 0) << r.out;
  for (const char* line : {"R=0/3/0 nvls=0 id=set", "R=1/3/1 nvls=0 id=set", "R=2/3/2 nvls=0 id=set"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
}

TEST(CommCli, LaunchPropagatesAFailureAndStopsTheOthers) {
  const auto t0 = std::chrono::steady_clock::now();
  const CliRun r = run_cli("launch -n 3 -- sh -c 'if [ \"$RANK\" = 1 ]; then exit 7; fi; exec sleep 60'");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.rc, 7) << r.out;
  EXPECT_NE(r.out.find("rank 1 exited with code 7"), std::string::npos) << r.out;
  EXPECT_LT(seconds, 20) << "the sleeping ranks were not stopped";
}

TEST(CommCli, LaunchedNcclRanksMustAgreeWithWorldSize) {
  expect_error("launch -n 2 -- " + xstage_cli_path() + " a2a --backend nccl --ranks 3",
               "--ranks 3 but WORLD_SIZE = 2");
  expect_error("launch -n 0 -- true", "launch -n 0: too many or too few processes; expected 1 .. 256");
  expect_error("launch -n 2 -- /nonexistent/xstage-child", "cannot run '/nonexistent/xstage-child'");
}

TEST(CommCli, HelpOnTheCommCommands) {
  for (const char* sub : {"a2a", "launch", "selftest", "selftest flag-timeout"}) {
    const CliRun r = run_cli(std::string(sub) + " --help");
    EXPECT_EQ(r.rc, 0) << sub << "\n" << r.out;
  }
}

TEST(World, PeerBackendNeedsOneGpuPerRank) {
  const int ranks = xstage::cuda_device_count() + 1;
  try {
    xstage::World::create({xstage::Backend::peer, ranks, xstage::Placement::device, 0});
    FAIL() << "peer world with more ranks than GPUs";
  } catch (const xstage::Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(ranks) + " GPUs"), std::string::npos) << e.what();
  }
}
