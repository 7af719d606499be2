#pragma once
// What the Burst-Gap profile predicts for the fused expert-parallel MoE layer
// (docs/model.md, section 9; docs/design/moe-model.md), with no refitting.
// CPU only.
//
// The fused kernel is simulated as the GPU runs it: G SMs claim L1 and L2
// tiles from two counters by the kernel's claim rules (the schedule), an L2
// tile waits for its expert's L1 tiles, computes, then its epilogue stores the
// rows that leave the GPU's memory into the X-Stage (src/sim/simulator.cpp);
// an SM whose store stalls is stalled. The fused kernel also copies the
// dispatched rows itself (spare producer warps, pool order, from the launch's
// start): an L1 tile waits until its expert's rows are all read. Dispatch
// (route and plan) and combine are their bytes over the path's rate plus
// fixed costs.
//
// Paths. emulated (one GPU runs all P ranks, every symmetric buffer in the
// placement's memory): the launch holds every rank's experts and every L2 row
// goes through the stage (host placement: PCIe; device: the GPU's own
// memory). One rank a GPU (peer, nccl): a launch holds its rank's experts and
// (P-1)/P of its L2 rows cross the link; the rest are local stores.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "xstage/model/profile.hpp"
#include "xstage/model/simulator.hpp"
#include "xstage/moe/moe.hpp"
#include "xstage/moe/moe_layer.hpp"

namespace xstage {

// ---- the shapes (the same numbers as moe_layer.hpp's table; kept here so
// that src/sim needs nothing from the runtime)
const std::vector<MoeShape>& moe_prediction_shapes();
// A known name or "hidden/inter/experts/topk"; throws xstage::Error listing the names.
MoeShape moe_prediction_shape(const std::string& text);

// "expert-wave", "interleaved", "model-guided" (moe_layer.hpp's to_string
// lives in the runtime; src/sim keeps its own).
std::string moe_schedule_name(MoeSchedule s);

// ---- per-tile compute time without a measurement
// The GEMM throughput table written down from results/h200/moe/moe-gemm.json
// (docs/design/moe-model.md): a tile of K columns takes
//   K * max(ns_per_k(BLOCK_M),  kWeightNsPerK / m_blocks)
// where the first term is the tensor cores' (m128n256: 13.0 ns per column of
// K, the median of the runs with >= 256 rows an expert) and the second the
// weights' HBM traffic: a 256 x K slice of bf16 weights per tile, shared by
// the expert's m-blocks through L2 (16.9 ns per column when one m-block reads
// it alone: 512 B over a 132nd of ~4.0 TB/s; the runs with 64 and 128 rows an
// expert measure 16.2-18.1).
double moe_table_tile_ns(int K, int block_m, int m_blocks);

// ---- one fused launch
struct MoeLaunch {
  int hidden = 0, inter = 0;
  std::vector<int> expert_rows;  // rows per expert of the launch, in launch order
  int block_m = 128, block_n = 256;
  int sms = 132;                 // G: CTAs of the persistent grid, one an SM
  double remote_fraction = 1;    // share of L2's rows stored through the stage
  // Multiplies the table's tile times (1: the table; from a measured
  // compute-only time otherwise, see moe_scale_to_compute_only).
  double compute_scale = 1;
  // The dispatched rows the kernel reads itself (the fused variant; 0 and 0:
  // the pull kernel copied them before the launch, as for the unfused and
  // compute-only variants): shares of the launch's rows (hidden x 2 bytes
  // each) read over the path at what the copy warps read alone
  // (Profile::copy_read_Bps: the duplex probe's reads alone, else R) and from
  // the GPU's own memory at h200-local's. The copies run in pool order (the
  // launch's expert order) from the launch's start; where the profile has
  // duplex rates they share the link with L2's stores (docs/model.md,
  // section 9), else they run beside them.
  double copy_path_fraction = 0;
  double copy_local_fraction = 0;
  // An L1 tile waits until every block of this many pool rows that its rows
  // touch is copied (the kernel's kFusedCopyBlockRows).
  int copy_block_rows = 64;
};

double moe_l1_tile_ns(const MoeLaunch& l, int expert);
double moe_l2_tile_ns(const MoeLaunch& l, int expert);

// One claimed tile of the claim-rule schedule.
struct MoeClaimedTile {
  int gemm = 1;        // 1 = L1, 2 = L2
  int index = 0;       // in its GEMM's tile order (expert, n-block, m-block)
  int expert = 0;
  int rows = 0;        // rows of its m-block
  int64_t row0 = 0;    // the pool row of its first row
  int sm = 0;
  double claim_ns = 0;   // the SM claims it
  double start_ns = 0;   // compute starts (L1: once its rows' blocks are copied; L2: after its expert's L1 tiles are done)
  double end_ns = 0;     // the SM is free again (L2: its store accepted by the stage)
  double store_bytes = 0;  // L2: bytes through the stage
};

struct MoeClaimSchedule {
  std::vector<MoeClaimedTile> tiles;  // in claim order
  double makespan_ns = 0;   // the last SM is free
  double drained_ns = 0;    // the stage is empty again after the last store (>= makespan)
  double stalled_ns = 0;    // summed over L2 tiles: time their SMs lost to a full stage
  double idle_ns = 0;       // summed over L2 tiles: time their SMs waited for the expert's L1 tiles
  double rows_wait_ns = 0;  // summed over L1 tiles: time their SMs waited for their rows to be copied
  double max_occupancy = 0, store_bytes = 0;
  double l1_tiles = 0, l2_tiles = 0;
  // Where the copies share the link with the stores (Profile::duplex_read_Bps):
  // the copy times' last relative move when the rounds ran out (0: settled).
  double copies_unsettled = 0;
};

// When each expert's rows are all in the pool (ns from the launch's start):
// the copies in pool order with the link to themselves, the path's share at
// profile.copy_read_Bps() and the local share at h200-local's, each a stream
// of its own; 0 for every expert when the launch copies nothing.
std::vector<double> moe_rows_ready_ns(const MoeLaunch& launch, const Profile& profile);

// The kernel's claim rules (sched/layer_claims.cuh; docs/design/scheduler.md)
// and the X-Stage in one event loop (simulate_fed): an SM claims its next
// tile when its last one, store included, is done, so what it claims follows
// its stalls. Not modelled: the kernel's claims on stale counter values (an
// atomic add may give a tile past the one decided for, and an L2 tile not
// yet allowed is parked while its CTA runs L1 tiles): here the decision and
// the claim see the same counters, so no tile is ever parked.
// Throws xstage::Error for a launch with a non-positive size or grid.
MoeClaimSchedule moe_claim_schedule(const MoeLaunch& launch, const MoeSchedulePlan& plan, const Profile& profile,
                                    bool record_tiles = true);

// The share schedule's even spread, as the kernel computes it for l2_share = 0:
// the spread starts at t1_start = min(L1 tiles through the first expert with
// rows + lag, all L1 tiles), and L2 takes W2 / (W2 + (L1 tiles - t1_start) x K1)
// of the work claimed from there (W2: all L2 work).
double moe_default_l2_share(const MoeLaunch& launch, int lag_tiles);
long moe_share_start_tiles(const MoeLaunch& launch, int lag_tiles);

struct MoeExpertsPrediction {
  double experts_ns = 0;   // the launch until its last store is visible
  double compute_ns = 0;   // the same claim schedule with no stores (the floor)
  double stalled_ns = 0;   // summed over L2 tiles: time their SMs lost to a full stage
  double idle_ns = 0;      // summed over L2 tiles: time their SMs waited for L1 tiles
  double rows_wait_ns = 0; // summed over L1 tiles: time their SMs waited for their expert's rows
  double max_occupancy = 0;
  double store_bytes = 0;
};
MoeExpertsPrediction moe_predict_experts(const MoeLaunch& launch, const MoeSchedulePlan& plan, const Profile& profile);

// The makespan of the launch with no stores and no copies (the compute-only
// variant: the pull kernel copied the rows), for the given compute scale.
double moe_compute_only_ns(const MoeLaunch& launch);
// compute_scale so that the compute-only makespan equals `measured_ns`.
double moe_scale_to_compute_only(const MoeLaunch& launch, double measured_ns);

// ---- regime
struct MoeRegime {
  double rho = 0;          // store rate of G SMs running L2 tiles / R
  // Expert-wave's waves (means over the waves): bytes a wave's L2 tiles
  // store, and what is left in the stage when they are done (burst less what
  // drained meanwhile, B (1 - 1/rho)).
  double burst_bytes = 0, excess_bytes = 0;
  // What the stage offers a wave (mean over the waves): where the previous
  // wave's excess drains during the L1 tiles between (excess <= R x their
  // time) an empty stage's capacity (Q; after a cold start what the bytes
  // stored so far gave back), else Q_fill.
  double capacity_bytes = 0;
  double mean_rate = 0;    // all stored bytes / compute-only time, over R
  // "free": rho <= 1; "absorbed": rho > 1, most waves' excess within their
  // capacity; "contended": rho > 1, most waves overflow, mean rate <= 1;
  // "drain-bound": the same with mean rate > 1 (no schedule keeps up with
  // the drain).
  std::string name;
  bool contended() const { return name == "contended" || name == "drain-bound"; }
};
MoeRegime moe_classify_regime(const MoeLaunch& launch, const Profile& profile, int wave_tiles = 0);
// rho alone (0 when nothing goes through the stage).
double moe_rho(const MoeLaunch& launch, const Profile& profile);

// ---- the model-guided plan (docs/model.md, section 9)
// Plans the kernel can run, each simulated on the launch; the least
// predicted experts time wins: the interleaved default (the even spread,
// lag = grid) unless another is more than kMoePlanTie faster (the model's
// differences below that are not worth a change of plan). The candidates:
//   - the interleaved default;
//   - where the default's L2 tiles wait for their L1 tiles more than
//     kMoePlanIdle of the SM time: lag 2 G and 4 G;
//   - where rho > 1 and 1/rho is below the even spread: L2's share capped at
//     1/rho (the share at which G SMs' L2 stores arrive at R), lag G.
// Where rho <= 1 the stage never holds an issuer back, so the schedules
// differ only in compute order, which the tile-time table does not see: there
// a launch whose experts average at most kMoeWaveExpertTiles x G L1 tiles
// (short experts; an expert-wave wave of 2 G L1 tiles holds eight or more of
// them) runs expert-wave, W = 2 G, which measured 1-4% faster than the even
// spread on device memory and over NVLink at those sizes
// (docs/design/moe-model.md, "Compute order where the stage is free"). The
// candidates are simulated in parallel, one a core. The plan's schedule is
// expert_wave or interleaved (the kernel runs kScheduleExpertWave or
// kScheduleShare); the caller labels it model-guided.
inline constexpr double kMoePlanTie = 0.01;
inline constexpr double kMoePlanIdle = 0.001;
inline constexpr double kMoeWaveExpertTiles = 0.25;
struct MoePlanCandidate {
  MoeSchedulePlan plan;
  std::string why;          // what the candidate tries
  double experts_ns = 0;    // predicted, as moe_predict_experts does
};
// Mean L1 tiles (m-blocks x n-blocks of 2 x inter) an expert, over the
// launch's experts with rows (0 if none).
double moe_mean_l1_tiles(const MoeLaunch& launch);
std::vector<MoePlanCandidate> moe_plan_candidates(const MoeLaunch& launch, const Profile& profile);
MoeSchedulePlan moe_plan_for_launch(const MoeLaunch& launch, const Profile& profile);
// The plan for a configuration's expected uniform rows per expert (tokens * k
// / E per source) and the GEMM table, whatever rows a sweep recorded: what
// the layer runs when it asks moe_plan_schedule. The path follows the
// profile's transport: "host" and "local" are emulated paths (every L2 row
// through the stage, the launch holds all P ranks), others one rank a GPU
// ((P-1)/P). Throws xstage::Error for a bad shape, tokens, P or SM count.
MoeSchedulePlan moe_plan_schedule(const MoeShape& shape, int tokens, int P, int sms, MoeTile tile,
                                  const Profile& profile);

// ---- a whole configuration
struct MoeConfig {
  MoeShape shape;
  int tokens = 0, P = 0;
  std::string backend = "emulated";   // emulated, peer, nccl
  std::string placement = "host";     // host, device
  std::string routing = "uniform";    // uniform, zipf
  MoeTile tile = MoeTile::automatic;  // automatic: m64n256 when <= 64 rows an expert are expected
  std::vector<int> rows_per_rank;     // rows each rank received; empty: the uniform expectation
  int sms = 132;
  // The plans the kernel ran (a sweep records them); a scheduler without one
  // gets the default: expert-wave 2 x grid, interleaved the even spread with
  // lag = grid, model-guided the plan moe_plan_schedule gives the configuration.
  std::map<MoeSchedule, MoeSchedulePlan> plans;
  bool emulated() const { return backend == "emulated"; }
};

struct MoeLayerPrediction {
  MoeSchedulePlan plan;
  double dispatch_ns = 0, experts_ns = 0, combine_ns = 0;  // experts: the fused kernel, its row copies included
  double stalled_ns = 0;
  double rows_wait_ns = 0;  // summed over L1 tiles: their SMs waited for the expert's rows
  double total_ns() const { return dispatch_ns + experts_ns + combine_ns; }
};

struct MoeConfigPrediction {
  std::map<MoeSchedule, MoeLayerPrediction> schedulers;
  MoeRegime regime;
  double compute_ns = 0;         // the experts' compute-only makespan used
  double compute_scale = 1;      // over the table's tile times
  double bytes_dispatch = 0, bytes_combine = 0, bytes_stored = 0;  // through the path (the launch's GPU)
  int block_m = 0;
};

// The plan moe_plan_schedule gives the configuration (its expected uniform
// rows and the GEMM table, on the configuration's own path).
MoeSchedulePlan moe_plan_for_config(const MoeConfig& c, const Profile& profile);

// The launches of a configuration: one (emulated), or one per rank.
std::vector<MoeLaunch> moe_config_launches(const MoeConfig& c);
// The default profile of a configuration's path: h200-host-pcie (emulated,
// host), h200-local (emulated, device), h200-peer (peer, nccl).
std::string moe_default_profile(const MoeConfig& c);

// `compute_only_experts_ns`: the measured compute-only time of the fused
// kernel (the experts phase); the tile times are scaled to it. Without it the
// table. Throws xstage::Error for a configuration that makes no sense.
MoeConfigPrediction predict_moe_config(const MoeConfig& c, const Profile& profile,
                                       std::optional<double> compute_only_experts_ns = std::nullopt);

}  // namespace xstage
