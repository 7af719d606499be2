#pragma once
// The X-Stage probe: K producers (CTAs of W warps) each store their share of a
// V-byte burst to a destination, then compute for a gap G, N times. It
// measures the issuer-visible issue span of every burst on every producer and,
// on request, the completion: a system-scope fence returning (the issuer waits:
// the completion-coupled counterfactual made real) or a receiver seeing a
// release flag written after the burst.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace xstage {

enum class Transport { local, host, peer };
enum class StoreKind { v4, b64, b32, bulk };  // 16-, 8-, 4-byte st.global; TMA bulk from shared memory
enum class GapKind { spin, fma, mma };          // clock spin; FP32 FMA chains; bf16 tensor-core mma
enum class BurstCompletion { none, fence, flag };

const char* to_string(Transport t);
const char* to_string(StoreKind s);
const char* to_string(GapKind g);
const char* to_string(BurstCompletion c);
Transport parse_transport(const std::string& s);  // throws xstage::Error listing the choices
StoreKind parse_store_kind(const std::string& s);
GapKind parse_gap_kind(const std::string& s);
BurstCompletion parse_burst_completion(const std::string& s);

struct ProbePoint {
  int K = 132;        // producers (CTAs)
  int warps = 8;      // warps per producer
  double V_bytes = 1 << 20;  // burst volume over all producers (rounded down to K x 16 B multiples)
  double gap_ns = 0;
  int bursts = 64;
  StoreKind store = StoreKind::v4;
  GapKind gap = GapKind::spin;
  BurstCompletion completion = BurstCompletion::none;
  bool warmup = true;     // touch every slot first (translations cached), then let the stage drain
  double settle_ns = -1;  // pause before the measured bursts; < 0: long enough to drain the warm-up twice
  // Producer k starts its first burst k / (K - 1) of this after producer 0
  // (then keeps its own period): bursts that do not coincide, as the CTAs
  // of a kernel that have drifted apart. Such points are not fitted (set
  // "stagger"): the model's producers run in lock step.
  double stagger_ns = 0;
};

// The largest stagger accepted: a probe run lasts milliseconds, so a spread
// of more than a second is a typo (a unit left out), and the producers would
// spin through it with the GPU held.
inline constexpr double kMaxStaggerNs = 1e9;

struct ProbeMeasurement {
  ProbePoint point;
  double V_bytes = 0;                 // what was really stored per burst
  std::vector<double> issue_max_ns;   // per burst: slowest producer's issue span
  std::vector<double> issue_mean_ns;  // per burst: mean over producers
  std::vector<double> fence_ns;       // per burst (completion == fence): burst start to fence return, slowest producer
  std::vector<double> complete_ns;    // per burst (completion == flag): earliest start to the receiver seeing every flag
  double cycles_per_ns = 0;           // SM clock measured during the run
  double run_ns = 0;                  // first producer start to last producer end (global timer)
  // The first bursts' start times, latest minus earliest (global timer): the
  // stagger asked for, plus what separates producers that wait for one instant.
  double stagger_realised_ns = 0;
  // The run's issue time per burst: for each producer, its own time from its
  // first burst to the end of its last, minus its gaps, over the bursts; the
  // slowest producer's. Producers drift apart under backpressure (arbitration
  // is not fair): some finish early, their bursts short, while others wait.
  // The slowest is active for the whole run, which cannot beat the drain; its
  // mean is what the model of K producers in lock step predicts, and what a
  // fused kernel's time sees.
  double issue_run_ns = 0;
  double sustained_Bps = 0;           // bursts * V / run_ns: what really left the producers
  uint64_t mismatches = 0;            // destination words that differ from what was stored
  uint64_t checked_words = 0;
};

class Prober {
 public:
  // Allocates the destination for the transport on `device` (peer: on device+1).
  // Throws xstage::Error with the reason (e.g. the peer transport on one GPU).
  Prober(Transport t, int device = 0, size_t dst_bytes = size_t(256) << 20);
  ~Prober();
  Prober(const Prober&) = delete;
  Prober& operator=(const Prober&) = delete;

  ProbeMeasurement run(const ProbePoint& p);
  // Copy-engine bandwidth over the same path (cudaMemcpyAsync device to
  // destination; peer: cudaMemcpyPeerAsync), bytes per second, median of `reps`.
  double copy_engine_Bps(size_t bytes = size_t(256) << 20, int reps = 7);
  double cycles_per_ns() const;
  Transport transport() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xstage
