#pragma once
// What the host hands the probe kernels. Plain data: included by host C++
// (src/runtime/prober.cpp) and by the kernels alike.
#include <cstdint>

#include "device/remote/flag_timeout_record.hpp"
#include "xstage/probe/probe.hpp"

namespace xstage::probe {

// Bursts recorded per run: the records sit in shared memory (24 B each).
constexpr uint32_t kMaxBursts = 2048;

// The bulk-store source tile in shared memory; every store kind writes the
// same pattern, which repeats every kTileBytes of a producer's chunk.
constexpr uint32_t kTileBytes = 16384;
constexpr uint32_t kTileWords = kTileBytes / 4;
static_assert((kTileWords & (kTileWords - 1)) == 0, "the pattern index is taken modulo a power of two");

struct KernelParams {
  uint8_t* dst;            // destination (local, peer or host-mapped)
  uint64_t slot_bytes;     // bytes of one burst = K * chunk_bytes
  uint32_t slots;          // bursts rotate over this many slots of dst
  uint32_t chunk_bytes;    // one producer's share of a burst, a multiple of 16
  uint32_t bursts;
  uint32_t slots_warm;     // slots touched by the warm-up pass before the measured bursts
  uint64_t gap_cycles;
  uint64_t settle_ns;      // pause after the warm-up, so the measured run starts on an empty stage
  uint64_t stagger_ns;     // producer k waits k / (K - 1) of this more before its first burst
  int K;
  BurstCompletion completion;
  uint64_t* flags;         // [K] release flags, in the destination's memory (flag mode)
  uint64_t* start_barrier; // [2] device memory, zeroed: the producers meet here before the measured bursts
                           // ([0] arrivals, [1] the latest arrival's global timer)
  uint64_t timeout_ns;     // the start barrier's and the receiver's flag waits
  remote::FlagTimeoutRecord* timeout_record;  // device memory, zeroed: what a wait that timed out waited for
  uint64_t* start_cycles;  // [bursts * K] SM clock at each burst's start
  uint32_t* gap_cycles_done;  // [bursts * K] cycles spent in each gap
  uint32_t* fence_cycles;  // [bursts * K] (fence mode)
  uint64_t* start_ns;      // [bursts * K] globaltimer at each burst's start
  uint64_t* visible_ns;    // [bursts] (flag mode)
  uint64_t* calib;         // [K * 4]: globaltimer, clock64 at start; globaltimer, clock64 after the last burst
  float* sink;             // never written in practice; keeps the gap work alive
};

}  // namespace xstage::probe
