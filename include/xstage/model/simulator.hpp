#pragma once
// Discrete-event (fluid) simulation of the X-Stage.
//
// K producers each run their own list of steps: store a burst of B bytes, or
// compute for t ns. A storing producer first pays the fixed issue cost, then
// pushes bytes at its issue rate (the first near_bytes of the burst at the near
// queue's rate, the rest at the producer's rate; all issuing producers together
// at most the aggregate issue rate) into a stage of capacity Q that drains at R.
// When the stage is full the issuers share the drain rate in proportion to
// their rates: that is the stall.
// Between events every rate is constant, so the simulation is exact for the
// fluid model and advances event by event, not tick by tick.
#include <cstddef>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "xstage/model/profile.hpp"

namespace xstage {

struct Step {
  // wait_drain: the producer's next memory requests queue behind the bytes
  // already in the stage (first in, first out): the step ends once the stage
  // has drained every byte stored before the step began, but not before
  // `amount` ns of compute that needs no new request (work whose loads were
  // issued earlier, e.g. a K/V ring's prefetched stages). On an empty stage
  // it is compute(amount).
  enum class Kind { store, compute, wait_drain };
  Kind kind = Kind::compute;
  double amount = 0;  // bytes for store, ns for compute and wait_drain
  static Step store(double bytes) { return {Kind::store, bytes}; }
  static Step compute(double ns) { return {Kind::compute, ns}; }
  static Step wait_drain(double ns) { return {Kind::wait_drain, ns}; }
};

struct Program {
  std::vector<Step> steps;
  long repeat = 1;  // the step list runs this many times
};

struct StageConfig {
  double R_Bps = 0;
  double Q_bytes = 0;
  // While a producer issues its first burst of a busy period (one that began
  // on an empty stage) the stage may fill to Q; otherwise to Q_fill (<= Q;
  // 0: Q) or the busy period's highest level, whichever is higher. This is
  // the profile's fill capacity (docs/model.md, section 4).
  double Q_fill_bytes = 0;
  // The cold start: the stage starts cold; what a busy period's first bursts
  // get is min(Q, Q_cold + Q_warm_per_byte x bytes stored so far) (0: Q).
  double Q_cold_bytes = 0;
  double Q_warm_per_byte = 0;
  IssueCost issue;  // with the near queue (near_bytes per producer), if any
  // false: one stage shared by all producers (the default; one link, one queue).
  // true: the stage is split statically, each producer owning Q/K of capacity
  //       draining at R/K (per-SM or per-queue limits); Q_cold too is split.
  bool per_producer_capacity = false;
  bool record_timeline = false;  // keep the occupancy at every event
  // A drain slower at first: R_early_Bps until R_early_until_ns, R after
  // (0, 0: R throughout). The MoE model's fused kernel stores while its row
  // copies read the same link's other direction (Profile::duplex_store_Bps).
  double R_early_Bps = 0;
  double R_early_until_ns = 0;
};
StageConfig stage_from_profile(const Profile& p);

struct BurstSpan {
  int producer = 0;
  long index = 0;        // the producer's n-th burst
  double start_ns = 0;   // issue starts (fixed cost included)
  double end_ns = 0;     // last byte accepted into the stage
  double bytes = 0;
  double stall_ns = 0;   // time lost to a full stage during this burst
  double issue_ns() const { return end_ns - start_ns; }
};

struct OccupancySample {
  double t_ns = 0;
  double bytes = 0;
  int stage = 0;  // stage index (producer) when per_producer_capacity, else 0
};

struct SimResult {
  double total_ns = 0;        // last producer finishes its program
  double drained_ns = 0;      // the stage is empty again after the last store
  double stalled_ns = 0;      // summed over bursts
  double drain_wait_ns = 0;   // summed over wait_drain steps: time beyond their compute spent waiting for the drain
  double max_occupancy = 0;   // bytes
  double bytes = 0;           // total stored
  long burst_count = 0;        // bursts finished, over all producers
  std::vector<BurstSpan> bursts;         // in completion order (without a SimObserver's on_burst)
  std::vector<OccupancySample> timeline; // only with record_timeline (without on_sample)
};

// Streams what the simulator sees instead of keeping it, so that memory does
// not grow with the number of bursts: with on_burst set, SimResult::bursts
// stays empty; with on_sample set (and record_timeline), so does the timeline.
// on_progress gets the fraction of bursts done, about every million bursts.
struct SimObserver {
  std::function<void(const BurstSpan&)> on_burst;
  std::function<void(const OccupancySample&)> on_sample;
  std::function<void(double fraction_done)> on_progress;
};

// Producers whose next steps are decided as they go (a persistent kernel's
// CTAs claiming tiles: what an SM claims depends on when it comes free, which
// depends on its stalls): called when `producer` has run every step it was
// given, at `t_ns`, to append its next steps (none: it is done). Fed at t = 0
// first, in producer order; at one instant, in the order the events come.
using StepFeed = std::function<void(int producer, double t_ns, std::vector<Step>& steps)>;

// Bursts the producers will run in all (store steps with bytes, times repeats).
double total_bursts(const std::vector<Program>& producers);

// Throws xstage::Error for a non-positive rate or capacity, a negative step,
// more than kMaxProducers producers, a producer storing more than kMaxBytes or
// computing longer than kMaxTimeNs, or more than kMaxSimulatedBursts bursts
// (xstage/core/limits.hpp).
SimResult simulate(const StageConfig& cfg, const std::vector<Program>& producers, const SimObserver& observer = {});

// The median, over burst indices >= skip, of the slowest producer's issue span
// at that index, computed as bursts stream by: an index is settled once every
// producer has finished it. Exact up to kExactValues settled indices; past
// that, the median of a uniform sample of that many (fixed seed), so memory
// stays bounded however many bursts run.
class SteadyIssueTracker {
 public:
  static constexpr size_t kExactValues = size_t(1) << 20;
  SteadyIssueTracker(size_t producers, long skip);
  void add(const BurstSpan& b);
  double median() const;  // 0 when no index >= skip was settled

 private:
  void settle(double slowest_ns);
  struct Open {
    double slowest_ns = 0;
    size_t seen = 0;
  };
  size_t producers_;
  long skip_;
  std::map<long, Open> open_;  // indices some but not all producers have finished
  std::vector<double> kept_;
  size_t settled_ = 0;
  std::mt19937_64 rng_{0x5eed};
};

// `producers` fed producers on one shared stage (per_producer_capacity is
// ignored). Throws xstage::Error as simulate() does for the stage, and for a
// fed step that is negative or not finite.
SimResult simulate_fed(const StageConfig& cfg, int producers, const StepFeed& feed, const SimObserver& observer = {});

// K producers in lock step: each stores V/K bytes then computes G ns, `bursts` times.
std::vector<Program> periodic_programs(int K, double V_total_bytes, double gap_ns, long bursts);

// The same producers a little apart, as the probe's --stagger runs them:
// producer k computes k / (K - 1) x spread_ns first, then its periodic
// program (unrolled: at most kMaxStaggeredBursts bursts in all). Throws
// xstage::Error for a spread that is negative, not finite or beyond
// kMaxTimeNs, and for too many bursts.
constexpr double kMaxStaggeredBursts = 1 << 22;
std::vector<Program> staggered_programs(int K, double V_total_bytes, double gap_ns, long bursts, double spread_ns);

// Reads a heterogeneous schedule: CSV with columns producer,kind,amount
// (kind "store" with a size such as 64KiB, or "compute" with a time such as
// 3us); each producer's rows run in file order. Producers are numbered 0..K-1
// without holes. Throws xstage::Error "<path>:<line>: <reason>".
std::vector<Program> read_schedule_csv(const std::string& path);
std::vector<Program> parse_schedule_csv(const std::string& text, const std::string& name);

// Median issue span of the bursts whose index is >= skip (steady state), taking
// for each burst index the slowest producer (what a block barrier would see).
// From SimResult::bursts; a streaming run uses SteadyIssueTracker.
double steady_issue_ns(const SimResult& r, long skip);

}  // namespace xstage
