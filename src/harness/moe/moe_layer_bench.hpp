#pragma once
// xstage moe's measurement: the expert-parallel MoE layer (xstage/moe/moe_layer.hpp)
// on one world, for one shape and a list of tokens per rank:
//   inputs   drawn on the GPU from a seed (the CPU redraws any element for the
//            check) with routing from a seed (uniform or Zipf(1)), or given
//            (the .npy files of `xstage moe`);
//   check    every variant and schedule on poisoned outputs: the fused
//            schedules bit for bit against the unfused baseline, sampled
//            tokens of every rank against the fp64 CPU reference of the layer;
//   bench    paired rounds: each round runs every variant and schedule once,
//            rotated; CUDA events around each run on the lead stream (fork /
//            join), the layer's phase times, the SM clock read before each
//            run; the floor max(compute-only, bytes / R).
// The sweep JSON of docs/design/moe-layer.md is built from the report by the
// command (src/cli/cmd_moe.cpp).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "xstage/comm/world.hpp"
#include "xstage/core/device.hpp"
#include "xstage/moe/moe_layer.hpp"

namespace xstage {

enum class MoeRouting { uniform, zipf };
MoeRouting parse_moe_routing(std::string_view text);  // "uniform", "zipf"; throws xstage::Error
std::string to_string(MoeRouting r);

// One rank's routing: ids [T, k] (global experts, distinct per token) and
// weights [T, k] (a softmax of random logits over the k picks).
struct MoeRoutes {
  int T = 0, k = 0;
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// The routing of rank `rank`'s T tokens, deterministic in (seed, rank):
//   uniform  k distinct experts, each set equally likely;
//   zipf     expert popularity Zipf(1) (the i-th most popular drawn with
//            weight 1 / (i + 1)) in an order drawn from the seed alone, the
//            same on every rank; a token's k experts drawn in turn, repeats
//            drawn again.
// Token 0 of every rank routes all k picks to experts of one rank (the next
// one) when a rank owns at least k experts, so that every run has such a
// token (the check compares it).
MoeRoutes moe_make_routes(MoeRouting r, int E, int k, int P, int T, uint64_t seed, int rank);

// Throws xstage::Error naming `where`, the token and the slot when an id is
// outside [0, E) or repeats within a token, or a weight is not finite.
void validate_moe_routes(const MoeRoutes& r, int E, const std::string& where);

// What crosses ranks in one run, from every rank's routing (pairs[s][r]: the
// (token, slot) pairs of source s whose expert rank r owns; each is one pool
// row of r).
struct MoeTraffic {
  std::vector<std::vector<int64_t>> pairs;  // [source][owner]
  std::vector<int64_t> rows_per_rank;       // pool rows each rank receives
  int64_t rows_max_rank = 0;
  // Bytes crossing ranks per run, the largest over ranks: the rows a rank
  // pulls from others (dispatch) and stores into others' combine buffers.
  double bytes_dispatch = 0, bytes_combine = 0;
  // The floor's bytes: what one GPU moves over the path per run, pulls and
  // stores. Emulated ranks share one GPU (every rank's rows, a rank's own
  // included: its buffers are in the same memory); peer and nccl: each GPU
  // its rows to and from other ranks (its own too with host placement), the
  // largest over GPUs.
  double bytes_floor = 0;
};
MoeTraffic moe_traffic(const std::vector<MoeRoutes>& routes, int E, int P, int hidden, Backend b, Placement p);

// Tokens of one rank the check compares: the last, the first, the first
// whose k experts sit on one rank, then drawn from `seed`; n in all (at most T).
std::vector<int> moe_check_tokens(const MoeRoutes& r, int E_per_rank, int n, uint64_t seed);

// The three schedules' labels in the report: "fused/expert-wave", ...
std::string moe_body_label(MoeLayerVariant v, MoeSchedule s);

struct MoeLayerBenchOptions {
  WorldOptions world;  // world.ranks < 1: emulated 2, peer every GPU, nccl WORLD_SIZE
  MoeShape shape;
  std::vector<int> tokens = {1024};  // per rank; the layer is sized for the largest
  MoeRouting routing = MoeRouting::uniform;
  uint64_t seed = 1;
  // Given inputs (one token count then): empty, drawn. x [P, T, hidden],
  // ids and weights [P, T, k] (ids integral), w13 [E, 2 inter, hidden] in the
  // usual layout (gate rows, then up rows; interleaved here), w2 [E, hidden, inter].
  std::vector<float> x, ids, weights, w13, w2;
  std::vector<MoeSchedule> schedules;     // fused; empty: all three
  std::vector<MoeLayerVariant> variants;  // empty: fused, unfused, compute-only
  MoeTile tile = MoeTile::automatic;
  double timeout_s = 10;
  bool check = false;
  int check_tokens = 0;  // per rank; 0: 6
  bool bench = false;
  int rounds = 11, warmup = 1;
  // The floor's R: the probe's quick sweep of the path in this process
  // (true), else the prediction profile's.
  bool floor_probe = false;
  std::string profile;  // the model-guided plan's; "": the path's embedded profile
  bool trace = false;   // one traced fused run per schedule and token count
};

struct MoeLayerCheck {
  bool ok = true;
  double rel_err = 0, max_abs_err = 0;
  int64_t tokens_checked = 0, unwritten = 0, expert_rows_mismatch = 0;
  std::optional<bool> bit_exact_vs_unfused;  // none without both unfused and fused
  std::string failure;                       // what failed, "" when ok
};

struct MoeTraceRow {
  MoeSchedule schedule = MoeSchedule::interleaved;
  int rank = 0;
  MoeTileTrace tile;
};

struct MoeLayerConfigResult {
  int tokens = 0;
  MoeTraffic traffic;
  std::vector<std::pair<MoeSchedule, MoeSchedulePlan>> plans;  // the fused schedules run
  // Bodies in the order they are registered (labels: moe_body_label), per
  // round (bench only): the whole run and its phases (dispatch, experts,
  // combine: MoeLayer::phase_ms), ms, the largest over ranks.
  std::vector<std::string> bodies;
  std::vector<std::vector<double>> ms;
  std::vector<std::array<std::vector<double>, 3>> phase_ms;
  std::vector<double> sm_clock_mhz;  // per round: the median of the readings before its runs
  int rounds = 0;
  std::optional<MoeLayerCheck> check;
  std::vector<MoeTraceRow> trace;
};

struct MoeLayerBenchReport {
  bool leader = true;
  DeviceInfo device;
  std::string world;
  Backend backend = Backend::emulated;
  Placement placement = Placement::device;
  int P = 0, sms = 0;
  MoeShape shape;
  MoeTile tile = MoeTile::automatic;  // as resolved
  MoeLayerSizes sizes;
  std::string profile;  // the model-guided plan's
  double profile_R_Bps = 0;
  std::optional<double> probe_R_Bps;  // measured in this process (--floor-probe)
  double probe_seconds = 0;
  bool inputs_given = false;
  std::vector<MoeLayerConfigResult> configs;
};

// CPU-only checks (before looking for a GPU); resolves world.ranks where it can.
void validate_moe_layer_bench_options(MoeLayerBenchOptions& o);
// The embedded profile of the path the L2 stores take.
std::string default_moe_profile(Backend b, Placement p);
// Throws xstage::Error when there is no GPU, the layer does not fit, a check
// fails, a wait times out, or CUDA fails.
MoeLayerBenchReport run_moe_layer_bench(MoeLayerBenchOptions o);

}  // namespace xstage
