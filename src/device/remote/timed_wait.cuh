#pragma once
// The one timed wait of the library's kernels: poll a value until it
// reaches what is expected, or stop after timeout_ns. One failure behaviour
// everywhere: the first waiter of the launch to time out fills the
// FlagTimeoutRecord (rank, flag, block, thread, time waited, expected and
// seen values); every wait of the launch that sees the record set stops
// (the run is lost; waiting the full timeout again would only delay the
// report); the kernel then ends normally and the host reports the record
// (no trap: a trap loses the context and the message; no printf: its call
// made ptxas spill in the fused kernels' mainloops, perf-log f8).
//
// What a value means is the caller's: a remote rank's flag, a count of tiles
// or rows done inside the launch. The names in the record say which (the
// caller's convention, documented beside its record's reader).
#include <cstdint>

#include "device/ptx/timer.cuh"
#include "device/remote/flag_timeout_record.hpp"

namespace xstage::remote {

// Whether a wait of this launch (or of an earlier one that shares the
// record) has already timed out.
__device__ __forceinline__ bool wait_given_up(const FlagTimeoutRecord* r) {
  return r != nullptr && *static_cast<const volatile unsigned int*>(&r->set) != 0u;
}

// The first timed-out waiter names what it waited for; later ones leave it.
__device__ __forceinline__ void record_timeout(FlagTimeoutRecord* r, int rank, int flag, uint64_t waited_ns,
                                               uint64_t expected, uint64_t seen) {
  if (r != nullptr && atomicCAS(&r->set, 0u, 1u) == 0u) {
    r->rank = rank, r->flag = flag, r->block = int(blockIdx.x), r->thread = int(threadIdx.x);
    r->waited_ns = waited_ns, r->expected = expected, r->seen = seen;
  }
}

// What a timed wait is on: where the clock started, how long it may run,
// and where a timeout is told.
struct WaitBudget {
  uint64_t start_ns;
  uint64_t timeout_ns;
  FlagTimeoutRecord* record;
};

__device__ __forceinline__ WaitBudget start_wait(uint64_t timeout_ns, FlagTimeoutRecord* record) {
  return WaitBudget{ptx::globaltimer_ns(), timeout_ns, record};
}

// Polls `poll()` (the value now; relaxed or acquire is the caller's choice)
// until it is >= expected. `seen` holds a first poll already made. On a
// timeout, or once the launch has given up, records what name(rank, flag)
// says was waited for, with the values, and returns false. `sleep_ns`
// between polls: short where the value comes from this GPU, longer where
// each poll crosses a link.
// A wait reads the record only once it has waited kGiveUpCheckNs: a normal
// wait (microseconds) then costs no extra load a poll (the receivers' last
// flag is seen one poll after it lands, perf-log f10), and a lost run still
// ends within a millisecond of its first timeout.
inline constexpr uint64_t kGiveUpCheckNs = 1'000'000;

template <class Poll, class Name>
__device__ __forceinline__ bool wait_geq(Poll&& poll, uint64_t seen, uint64_t expected, const WaitBudget& b,
                                         Name&& name, unsigned sleep_ns = 128) {
  while (seen < expected) {
    const uint64_t waited = ptx::globaltimer_ns() - b.start_ns;
    const bool given_up = waited > kGiveUpCheckNs && wait_given_up(b.record);
    if (waited > b.timeout_ns || given_up) {
      if (!given_up) {
        int rank = 0, flag = 0;
        name(rank, flag);
        record_timeout(b.record, rank, flag, waited, expected, seen);
      }
      return false;
    }
    __nanosleep(sleep_ns);
    seen = poll();
  }
  return true;
}

// The same, for a wait whose rank and flag are known up front.
template <class Poll>
__device__ __forceinline__ bool wait_geq(Poll&& poll, uint64_t seen, uint64_t expected, const WaitBudget& b, int rank,
                                         int flag, unsigned sleep_ns = 128) {
  return wait_geq(poll, seen, expected, b, [rank, flag](int& r, int& f) { r = rank, f = flag; }, sleep_ns);
}

}  // namespace xstage::remote
