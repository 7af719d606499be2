#pragma once
// xstage ulysses's measurement: a sequence-length sweep of the five Ulysses
// variants (include/xstage/ulysses/ulysses.hpp) on one world, each timed the
// nccl-tests way (warm-up, CUDA events per iteration, the median), with the
// Burst-Gap profile's prediction next to it (include/xstage/ulysses/ulysses_prediction.hpp)
// and the physical floor max(attention-only, bytes sent / R).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "xstage/core/device.hpp"
#include "xstage/model/profile.hpp"
#include "xstage/probe/probe.hpp"
#include "xstage/ulysses/ulysses.hpp"

namespace xstage {

class World;

struct UlyssesBenchOptions {
  WorldOptions world;  // world.ranks < 1: emulated 8, peer every visible GPU, nccl WORLD_SIZE
  int64_t batch = 1, heads = 24, head_dim = 128;
  std::vector<int64_t> seqs = {4096};  // total sequence lengths S
  std::vector<UlyssesVariant> variants;  // empty: all five
  std::vector<StorePath> stores;     // fused and coupled; empty: vector16, bulk, paced
  std::vector<TileOrder> orders;         // fused; empty: both (coupled runs the rotated order)
  std::vector<Completion> flags;         // fused; empty: at-exit
  std::vector<A2aVersion> a2a;           // sequential and pipelined; empty: every available one
  // Pipelined: head chunks a rank and row chunks of the sequence, every
  // pair of the two lists at most 32 chunks in all; both empty:
  // ulysses_pipeline_sweep at each S; one empty: {1}.
  std::vector<int> chunks, row_chunks;
  bool pipeline_graph = true;  // pipelined: CUDA-graph replay (UlyssesRun::graph)
  std::vector<int> paced_rows;           // paced slices to run; empty: the default (kDefaultPacedRows)
  int iters = 10, warmup = 1;
  double max_seconds_per_point = 2.0;  // fewer iterations (at least 3) when one run is long
  // Paired timing (attention-only among the variants): each pair after one
  // more attention-only run, so that both of its runs follow one
  // (docs/perf-log.md, f12); false: the pairs back to back.
  bool settled_pairs = false;
  std::string timeline;  // "": none; else every timed run in order, as CSV (S, run, configuration, time_us)
  bool check = false;
  int check_rows = 8;  // rows per rank compared with the fp64 CPU reference
  uint64_t seed = 1;
  double timeout_s = 60;
  std::string dump_dir;  // "": none; else the first S's inputs and fused output as .npy (UlyssesAttention::dump_npy)
  std::string profile;  // for the prediction; "" = the embedded profile of the path, "none" = no prediction
  // The profile of the GPU's own memory, whose store T0 the attention-only
  // time contains (the prediction takes it out of each tile); "" = "h200-local".
  std::string local_profile;
  AttentionKernel kernel = AttentionKernel::wgmma_pingpong;  // or mma_sync (UlyssesAttention)
  // The floor's R: false, the prediction profile's R (not measured in this
  // run); true, the probe's quick sweep on the path of the placement, run
  // and fitted in this process before the sweep (ulysses_floor_probe).
  bool floor_probe = false;
};

struct UlyssesBenchRow {
  std::string variant, placement, backend, store = "-", order = "-", flags = "-", a2a = "-";
  int paced_rows = 0;  // paced: the fewest rows a send carries; 0 otherwise
  int chunks = 0;      // pipelined: head chunks a rank; 0 otherwise
  int row_chunks = 0;  // pipelined: row chunks of the sequence (as made, ulysses_row_chunks); 0 otherwise
  bool graph = false;  // pipelined: replayed as a CUDA graph
  int P = 0;
  int64_t B = 0, S = 0, H = 0, D = 0;
  double time_us = 0;                    // median over the rounds
  double time_min_us = 0, time_max_us = 0;  // the fastest and slowest round
  double enqueue_us = 0;  // the host's time to enqueue one run (from an idle GPU), the slowest rank's
  std::optional<double> predicted_time_us;
  // Paired timing: the median over rounds of this run's time over the
  // attention-only run just before it, minus 1 (none for attention-only, or
  // without an attention-only run to pair with).
  std::optional<double> residual_paired;
  int iters = 0;
  std::string check = "-";
};

// One per S: the best configuration of each variant (the least paired
// residual, else the least median time), and how many it was chosen from:
// the best of N is biased low by about the rounds' spread, more so with more
// configurations (docs/design/ulysses.md).
struct UlyssesBenchSummary {
  int64_t S = 0;
  double attention_only_us = 0, sequential_us = 0, pipelined_us = 0, fused_us = 0, coupled_us = 0;
  std::string sequential_a2a, pipelined_a2a;  // the best configurations' all-to-all versions
  int pipelined_chunks = 0;                   // and the best pipelined configuration's head chunks a rank
  int pipelined_row_chunks = 0;               // and its row chunks
  std::string fused_config;  // "vector16/rotated/lagged"
  int sequential_configs = 0, pipelined_configs = 0, fused_configs = 0;  // N of each best of N
  double predicted_fused_us = 0, predicted_sequential_us = 0;
  // The physical floor max(attention-only, payload / R): 0 without a rate
  // (UlyssesBenchReport::floor says where R came from). payload: the bytes
  // one GPU sends over the profiled path (ulysses_kernel_shape).
  double floor_us = 0, payload_bytes = 0;
  double rel_err = -1;  // sampled fp64 check; < 0: not checked
  // Per round, the best fused (coupled, pipelined) configuration's time over
  // the attention-only time of the same round, minus 1: paired, so that what
  // drifts between rounds cancels.
  std::vector<double> residual_fused_rounds, residual_coupled_rounds, residual_pipelined_rounds;
  double speedup() const { return sequential_us / fused_us; }
  double speedup_over_pipelined() const { return pipelined_us / fused_us; }
  double fused_over_floor() const { return fused_us / floor_us - 1; }
  // The same from the paired residual: (1 + residual) over the floor's ratio
  // to attention-only, minus 1 (what drifts between rounds cancels).
  double fused_over_floor_paired() const { return (1 + residual()) / (floor_us / attention_only_us) - 1; }
  // The median paired residual where there are rounds, else from the medians.
  double residual() const { return paired_or(residual_fused_rounds, fused_us); }
  double coupled_residual() const { return paired_or(residual_coupled_rounds, coupled_us); }
  double pipelined_residual() const { return paired_or(residual_pipelined_rounds, pipelined_us); }
  double predicted_residual() const { return (predicted_fused_us - attention_only_us) / attention_only_us; }

 private:
  double paired_or(std::vector<double> rounds, double us) const {
    if (rounds.empty()) return (us - attention_only_us) / attention_only_us;
    std::nth_element(rounds.begin(), rounds.begin() + rounds.size() / 2, rounds.end());
    return rounds[rounds.size() / 2];
  }
};

// Where the floor's drain rate R came from.
struct UlyssesFloorRate {
  double R_Bps = 0;
  std::string source;     // "probe" (measured in this process) or "profile"
  std::string profile;    // the fitted profile's name, or the prediction profile's
  std::string transport;  // the probed path: host, local or peer
  int samples = 0;        // probe: training rows fitted
  double probe_seconds = 0;  // probe: how long measuring and fitting took
};

struct UlyssesBenchReport {
  bool leader = true;
  std::optional<UlyssesFloorRate> floor;  // none: no rate (--profile none and no probe)
  std::string world, profile, kernel;
  std::string local_profile;  // whose store T0 the prediction takes out of each tile; "none" with no prediction
  DeviceInfo device;
  int tiles_concurrent = 0, block_m = 0;
  std::vector<UlyssesBenchRow> rows;
  std::vector<UlyssesBenchSummary> summary;
  std::vector<std::string> notes;  // warnings about the measurement (a run the host may have held up)
};

// CPU-only checks of the options (before looking for a GPU); resolves world.ranks where it can.
void validate_ulysses_options(UlyssesBenchOptions& o);
// Every attention-only run stores into the GPU's own memory, whatever the placement.
inline constexpr const char* kDefaultLocalProfile = "h200-local";
// load_profile, with an error that names --local-profile (where a default
// chose the profile, its name alone would not say where it came from).
Profile load_local_profile(const std::string& name);
// The probed path of a world's outputs: emulated ranks store into host memory
// (host) or the GPU's own (local); peer and nccl ranks into another GPU's
// (peer), or host memory with --placement host.
Transport ulysses_floor_transport(Backend b, Placement p);
// R of that path from GPU `device`: the probe's quick sweep (its training and
// completion points, as `xstage probe --transport T --sweep quick` measures
// them), fitted. Takes tens of seconds. Throws xstage::Error as the probe does.
UlyssesFloorRate ulysses_floor_probe(Transport t, int device);
// ulysses_floor_probe on the world leader's GPU (under nccl the other
// processes wait for it): every process learns R, and every process throws
// when the probe fails, the message led by "<command> --floor-probe".
UlyssesFloorRate floor_rate_on_world(World& w, const std::string& command);
// Throws xstage::Error when there is no GPU, a check fails, or CUDA fails.
UlyssesBenchReport run_ulysses_bench(UlyssesBenchOptions o);

}  // namespace xstage
