#pragma once
// When stores become visible: the far end of the X-Stage, measured.
//
// K producer CTAs issue B bursts of V bytes (16-byte stores, a gap G after
// each), and after each burst's data every CTA writes a per-(burst, CTA) tail
// marker with release semantics at system scope. Each producer logs
// %globaltimer at its first store of the burst, after its last store, and
// after the release fence. An observer at the destination timestamps each
// marker's arrival: a CPU thread (host path: mapped pinned memory), a kernel on
// the receiving GPU (peer path), or a second kernel on the same GPU (local
// path). The observer's clock is mapped onto GPU 0's %globaltimer by a
// ping-pong calibration before and after the run (docs/model.md, section 7).
//
// From the trace: per burst the issue span, the visible time (the last CTA's
// marker seen) and the stage's occupancy (bytes issued - bytes visible), next
// to the Burst-Gap model's view: a stage that drains at the profile's R, fed
// by the measured issue, and the simulator's own issue and drain.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xstage/model/profile.hpp"

namespace xstage {

enum class VisiblePath { host, peer, local };
const char* to_string(VisiblePath p);
VisiblePath parse_visible_path(const std::string& s);  // throws xstage::Error listing the choices
// The embedded profile of a path on the H200 (h200-host-pcie, h200-peer, h200-local).
const char* default_profile_name(VisiblePath p);

struct VisiblePoint {
  VisiblePath path = VisiblePath::host;
  int device = 0;            // the producers' GPU; the peer path's destination is device + 1
  int K = 132;               // producer CTAs
  int warps = 8;             // warps per producer
  double V_bytes = 1 << 20;  // burst volume over all producers (rounded down to K x 16 B multiples)
  double gap_ns = 0;
  int bursts = 64;
  double timeout_ns = 10e9;  // every wait: observer, calibration round, start barrier
  int calib_rounds = 2000;   // ping-pong rounds per calibration
  double dst_bytes = 256.0 * (1 << 20);  // destination buffer; bursts rotate through it
  // true: each CTA's marker follows a system-scope release fence, so whoever
  // sees it sees the burst, but the fence waits for the burst to drain and
  // holds the stage to about one burst. false: a relaxed marker right after
  // the CTA's stores are issued: the stage fills as it does under the probe,
  // and a marker may overtake its data (counted, not an error).
  bool fenced_markers = true;
};

// Throws xstage::Error naming the field, its value and what is expected.
void validate(const VisiblePoint& p);
// Bytes one producer stores per burst: V/K rounded down to 16 B (>= 16; validate() checks).
uint64_t visible_chunk_bytes(const VisiblePoint& p);

// ---- clocks

// One ping-pong round: the observer's clock at send and receive, the GPU's
// %globaltimer read in between (all relative to bases the caller chose).
struct PingRound {
  double t_send_ns = 0;
  double t_recv_ns = 0;
  double gpu_ns = 0;
};

// gpu = observer + offset_ns, within +- error_ns.
struct ClockOffset {
  double offset_ns = 0;
  double error_ns = 0;  // half the best round trip plus half the timer's resolution
  double rtt_ns = 0;    // the best round's round trip
  double at_ns = 0;     // observer time of the best round's midpoint
  int rounds = 0;
};

// Best of many rounds: the round with the shortest round trip. %globaltimer
// reads the floor of the true time to its resolution, so the estimate adds
// half a step and the error bound half a step. Throws on no rounds or a round
// that received before it sent.
ClockOffset estimate_offset(const std::vector<PingRound>& rounds, double timer_resolution_ns);

// The offset at observer time t, interpolated between a calibration before
// and one after the run (the two clocks drift by some ppm).
struct ClockMap {
  ClockOffset before, after;
  double at(double observer_ns) const;
  double error_ns() const;  // the larger error bound of the two
  double drift_ppm() const;
};

// ---- the fluid view of the stage (the model's drain at R)

struct Arrival {
  double start_ns = 0;  // bytes enter the stage uniformly over [start, end] (at start when end <= start)
  double end_ns = 0;
  double bytes = 0;
};

// A stage that drains at R whenever it holds bytes, fed by the arrivals; FIFO
// in the order of the arrivals' indices.
class FluidStage {
 public:
  FluidStage(const std::vector<Arrival>& arrivals, double R_Bps);
  double arrived(double t_ns) const;
  double departed(double t_ns) const;
  double occupancy(double t_ns) const { return arrived(t_ns) - departed(t_ns); }
  double max_occupancy() const;
  // When `bytes` have left the stage (+inf past the total).
  double time_departed(double bytes) const;

 private:
  std::vector<double> t_, a_, d_;  // breakpoints of the piecewise-linear arrivals and departures
};

// ---- the trace and what it says

// What one run recorded. Times are on GPU 0's %globaltimer, in ns relative
// to the run's first store (the earliest start of burst 0).
struct VisibleTrace {
  VisiblePoint point;
  uint64_t chunk_bytes = 0;
  double V_bytes = 0;                // chunk_bytes * K: what was stored per burst
  std::vector<double> start_ns;      // [b * K + k] first store of producer k's share of burst b
  std::vector<double> issued_ns;     // [b * K + k] after its last store
  std::vector<double> fenced_ns;     // [b * K + k] after the release fence (the marker is stored next)
  std::vector<double> seen_ns;       // [b * K + k] observer saw the marker (NaN: never)
  double timer_resolution_ns = 0;    // GPU 0's %globaltimer step
  double observer_resolution_ns = 0; // the observer's clock step (GPU 1's timer; the CPU clock's read cost)
  double poll_interval_ns = 0;       // longest pass of the observer over its markers
  ClockMap clock;                    // observer -> GPU 0 (zero offset and error on the local path)
  std::string observer;              // "CPU poller thread", "GPU 1 poller kernel", ...
  uint64_t markers_seen = 0;
  uint64_t data_mismatches = 0;      // markers seen before their chunk's data
  uint64_t destination_mismatches = 0;
  uint64_t checked_words = 0;
};

struct VisibleBurst {
  int burst = 0;
  double issue_start_ns = 0, issue_end_ns = 0, fence_end_ns = 0;
  double first_visible_ns = 0, visible_ns = 0;
  // At the burst's issue end: cumulative bytes issued and seen by then, and their difference.
  double bytes_issued = 0, bytes_visible = 0, occupancy_bytes = 0;
  double drain_ns = 0;                                       // the model: V / R
  double model_visible_ns = 0, model_occupancy_bytes = 0;    // the model's drain fed by the measured issue
  double sim_issue_start_ns = 0, sim_issue_end_ns = 0, sim_visible_ns = 0, sim_occupancy_bytes = 0;  // simulator
};

struct VisibleSample {
  double t_ns = 0;
  double occupancy_bytes = 0, model_occupancy_bytes = 0, sim_occupancy_bytes = 0;
};

struct VisibleReport {
  VisibleTrace trace;
  std::string profile_name;
  double R_Bps = 0, Q_bytes = 0, latency_ns = 0;
  std::vector<VisibleBurst> bursts;
  std::vector<VisibleSample> timeline;  // at every burst's issue end and visible time, in time order
  double max_occupancy_bytes = 0;
  int max_occupancy_burst = 0;          // the burst whose issue end or visible time it was sampled at
  double model_max_occupancy_bytes = 0, sim_max_occupancy_bytes = 0;
  double issue_rate_Bps = 0;    // all bytes over first store to last issue end
  double visible_rate_Bps = 0;  // bytes of bursts 1..B-1 over burst 0's to the last burst's visible time
  double tolerance_ns = 0;      // clock error + both timers' resolution + the poll interval
  // Markers seen earlier than their producer's issue end by more than the
  // tolerance (cannot happen physically: a clock or ordering error).
  uint64_t early_markers = 0;
  double min_occupancy_bytes = 0;  // over the timeline, with visible times moved later by the tolerance
  bool all_seen() const;
};

// Builds the report of a trace (CPU only). The profile gives R, Q and the
// latency; the simulator runs the same K, V, G, bursts on it.
VisibleReport analyse_visible(const VisibleTrace& trace, const Profile& profile);

// ---- the measurement (needs the GPU(s))

class VisibleRunner {
 public:
  // Buffers for `point`'s path, device and destination size; measures the
  // timer resolutions. Throws xstage::Error (no GPU, no peer path, ...).
  explicit VisibleRunner(const VisiblePoint& setup);
  ~VisibleRunner();
  VisibleRunner(const VisibleRunner&) = delete;
  VisibleRunner& operator=(const VisibleRunner&) = delete;
  // One run: calibrate, launch, observe, calibrate, verify. Throws
  // xstage::Error when a marker never arrives (naming observer, burst, CTA and
  // values) or a kernel fails; mismatches are reported in the trace.
  VisibleTrace run(const VisiblePoint& p);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xstage
