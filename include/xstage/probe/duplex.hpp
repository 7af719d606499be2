#pragma once
// Both directions of a path at once: SMs read one far buffer while others
// store into a second (src/device/probe/duplex.cu), as the fused MoE kernel's
// row copies (reads) and L2 epilogue (stores) share one link. Each direction
// is timed alone and then with the other running; the sum of the two rates
// while both run is what the MoE model takes as the path's duplex capacity
// (Profile::duplex_Bps; docs/model.md, section 9).
#include <cstdint>
#include <string>

namespace xstage {

enum class DuplexPath { host, local, peer };
inline constexpr int kDuplexWarpsPerBlock = 8;  // a block's warps: read_warps read, the others store
const char* to_string(DuplexPath p);
DuplexPath parse_duplex_path(const std::string& s);  // throws xstage::Error listing the choices

struct DuplexConfig {
  DuplexPath path = DuplexPath::host;
  int device = 0;               // the GPU that runs the probe; the peer path's buffers are on device + 1
  uint64_t bytes = 256ull << 20;  // each direction, a multiple of 16
  int blocks_per_sm = 2;
  int read_warps = 4;           // of the 8 warps of a block; the others store
  int loads_in_flight = 4;      // 16-byte loads a reader lane keeps in flight: 4 (the fused MoE kernel's) or 8
  int reps = 5;                 // the median of each measurement is reported
};
// Throws xstage::Error naming the field for a value out of range.
void validate(const DuplexConfig& c);

struct DuplexRates {
  double read_alone_Bps = 0, store_alone_Bps = 0;  // one direction, the other role idle
  double read_both_Bps = 0, store_both_Bps = 0;    // each over its own span while the other runs
  double both_Bps = 0;        // read_both + store_both: the duplex capacity
  double overlap = 0;         // the two spans' overlap over the shorter span (1: they ran together throughout)
  int blocks = 0;
  double sm_clock_mhz = 0;
  // The stores' destination read back after the last run: 16-byte vectors
  // that do not hold the kernel's pattern (0: every store landed).
  uint64_t store_mismatches = 0, checked_vectors = 0;
};

// Needs the GPU (and device + 1 with peer access for the peer path).
DuplexRates measure_duplex(const DuplexConfig& c);

}  // namespace xstage
