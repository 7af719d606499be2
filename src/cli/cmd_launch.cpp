// xstage launch: one process per rank on this host (RANK, WORLD_SIZE,
// LOCAL_RANK as torchrun sets them), for the nccl backend.
#include <cstdlib>

#include <fmt/format.h>

#include "commands.hpp"
#include "harness/comm/process_launch.hpp"
#include "xstage/core/error.hpp"

namespace xstage::cli {

namespace {
// One process a GPU: a host has at most 16 GPUs today. A bound far above
// that keeps a typo (-n 100000) from filling the process table, which
// would make every other command on the machine fail to start.
constexpr int kMaxLocalRanks = 256;

struct LaunchArgs {
  int nprocs = 0;
  std::vector<std::string> command;
};
}  // namespace

void add_launch_command(CLI::App& app) {
  auto a = std::make_shared<LaunchArgs>();
  auto* sub = app.add_subcommand(
      "launch",
      "Start N processes of COMMAND on this host with RANK, WORLD_SIZE, LOCAL_RANK set; wait for all, stop all when "
      "one fails: xstage launch -n 2 -- xstage a2a --backend nccl");
  sub->add_option("-n,--nprocs", a->nprocs, "Processes (ranks), one per GPU")->required();
  sub->add_option("command", a->command, "The command after --, with its arguments")->required();
  sub->callback([a] {
    if (a->nprocs < 1 || a->nprocs > kMaxLocalRanks)
      throw Error(fmt::format("launch -n {}: too many or too few processes; expected 1 .. {} (one a GPU)", a->nprocs, kMaxLocalRanks));
    const int rc = launch_local(a->nprocs, a->command);
    if (rc != 0) std::exit(rc);  // the failing rank has already said why
  });
}

}  // namespace xstage::cli
