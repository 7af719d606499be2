#pragma once
// The all-to-all's nccl-tests-style benchmark (`xstage a2a`): a sweep of
// sizes over the versions of include/xstage/comm/a2a.hpp on one world.
#include <cstdint>
#include <string>
#include <vector>

#include "xstage/comm/a2a.hpp"
#include "xstage/comm/world.hpp"
#include "xstage/core/device.hpp"

namespace xstage {

// Bus bandwidth per algorithm bandwidth (docs/design/comm.md): 1 for the
// emulated backend (every byte crosses the one GPU's path), (P-1)/P^2 for
// peer and nccl (the nccl-tests alltoall factor applied to one rank's share).
double a2a_busbw_factor(Backend b, int ranks);

struct A2aBenchOptions {
  WorldOptions world;  // world.ranks < 1: emulated 8, peer every visible GPU, nccl WORLD_SIZE
  double min_bytes = 1 << 20, max_bytes = 64 << 20, step_factor = 2;
  int iters = 20, warmup = 5;
  int64_t batch = 1, heads = 24, head_dim = 128;
  size_t elem_bytes = 2;  // bf16
  std::vector<A2aVersion> versions;      // empty: every available one
  std::vector<A2aDirection> directions;  // empty: both
  bool check = false;
  uint64_t seed = 1;
};

struct A2aBenchRow {
  std::string version, direction, placement, backend;
  int ranks = 0;
  int64_t B = 0, S = 0, H = 0, D = 0;  // 0 for the d2h reference row
  double bytes = 0;                    // the whole all-to-all's payload, over all ranks
  double time_us = 0, algbw_GBps = 0, busbw_GBps = 0;
  std::string check = "-";  // "ok" once checked
};

struct A2aBenchReport {
  bool leader = true;  // this process prints (rank 0)
  std::string world;   // World::describe()
  DeviceInfo device;
  std::vector<A2aBenchRow> rows;
};

// CPU-only validation of everything the options can get wrong (run before
// looking for a GPU); resolves world.ranks where it can.
void validate_a2a_options(A2aBenchOptions& o);
// The layouts of the sweep: S derived from each size (bytes = B*S*H*D*e,
// rounded down); sizes below one row are dropped.
std::vector<UlyssesLayout> a2a_sweep(const A2aBenchOptions& o);
// Throws xstage::Error when there is no GPU, a check fails, or CUDA fails.
A2aBenchReport run_a2a_bench(A2aBenchOptions o);

}  // namespace xstage
