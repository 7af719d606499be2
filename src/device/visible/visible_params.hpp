#pragma once
// What the host hands the visibility kernels (src/device/visible/), and the
// data pattern and marker values both sides compute. Plain data: included by
// host C++ (src/runtime/visible/) and by the kernels alike.
#include <cstdint>

#include "device/host_device.hpp"
#include "device/remote/flag_timeout_record.hpp"

namespace xstage::visible {

// Per-(burst, CTA) tail markers sit one 64-byte line apart: the GPU's store
// of one marker never shares a line with another, so a CPU poller's cached
// copy of a line is invalidated only by the marker it is waiting for.
constexpr uint32_t kMarkerStrideWords = 8;
constexpr uint32_t kMaxBursts = 1024;        // producer records sit in shared memory (24 B each)
constexpr uint32_t kMaxMarkers = 1u << 20;   // bursts x K
constexpr uint32_t kMaxPollers = 1024;       // threads of the GPU poller CTA
constexpr uint32_t kMaxProducers = 4096;     // the GPU poller keeps one counter per producer in shared memory

// The value of burst b's marker: never 0 (the poison), and a garbage word is
// unlikely to pass for it.
XSTAGE_HD inline uint64_t marker_value(uint32_t b) { return (uint64_t(0x56495342u) << 32) | (b + 1u); }

// The 32-bit word at word_in_chunk of burst b's data (every producer writes the
// same pattern into its own chunk).
XSTAGE_HD inline uint32_t data_word(uint32_t b, uint32_t word_in_chunk) {
  return (0x7A11F00Du ^ (b * 0x9E3779B9u)) + word_in_chunk * 0x85EBCA6Bu;
}

// Why an observer (GPU poller, ping-pong responder) stopped early.
enum StatusCode : uint64_t { kOk = 0, kTimeout = 1, kWrongValue = 2, kQuit = 3 };

// status[0] = code, [1] = burst (or round), [2] = producer, [3] = value seen,
// [4] = value expected, [5] = ns waited.
constexpr int kStatusWords = 6;

struct ProducerParams {
  uint8_t* dst;             // destination: host-mapped, peer or local memory
  uint64_t slot_bytes;      // one burst = K * chunk_bytes
  uint32_t slots;           // bursts rotate over this many slots of dst
  uint32_t chunk_bytes;     // one producer's share of a burst, a multiple of 16
  uint32_t bursts;
  int K;
  uint64_t gap_cycles;      // SM cycles of clock spin after each burst
  uint64_t settle_ns;       // pause after the warm-up, so the measured run starts on a drained stage
  uint64_t* markers;        // [bursts * K * kMarkerStrideWords], in the destination's memory
  uint64_t* start_barrier;  // [2] device memory, zeroed (device/comm/grid_start.cuh)
  uint64_t timeout_ns;      // the start barrier's wait
  remote::FlagTimeoutRecord* timeout_record;  // device memory, zeroed: filled if that wait timed out
  uint64_t* log;            // [bursts * K * 3]: globaltimer at first store, after the last store, after the fence
  uint32_t fenced_markers;  // 1: fence.acq_rel.sys + st.release.sys; 0: st.relaxed.sys (no fence, no wait)
};

struct PollerParams {
  const uint64_t* markers;  // in this GPU's memory
  const uint8_t* dst;       // the data the markers publish
  uint64_t slot_bytes;
  uint32_t slots;
  uint32_t chunk_bytes;
  uint32_t bursts;
  int K;
  uint64_t timeout_ns;      // from the poller's start until every marker is seen
  uint64_t* seen_ns;        // [bursts * K] this GPU's globaltimer when the marker was seen
  uint64_t* status;         // [kStatusWords]
  unsigned long long* data_mismatches;  // chunks whose last word was not the marker's burst's data
  unsigned long long* max_poll_ns;      // longest pass of one thread over its markers
};

struct PingParams {
  const uint64_t* request;  // host-mapped: the CPU writes round n (or kQuitRequest)
  uint64_t* response;       // host-mapped: [0] globaltimer, [1] round
  int rounds;
  uint64_t timeout_ns;      // per round
  uint64_t* status;         // [kStatusWords], device memory
};
constexpr uint64_t kQuitRequest = ~0ull;

}  // namespace xstage::visible
