#pragma once
// A common start for the measuring kernels (the probe, `xstage visible`):
// every producer (co-resident CTAs: the host checks the occupancy) arrives,
// and all begin at one instant of the global timer. A spin counted in each
// SM's own cycles from when that SM saw the barrier open ends 4-75 us apart
// over a settle of milliseconds, which is no lock step; the global timer is
// one clock for every SM (its step is 32 ns on the H200).
#include <cstdint>

#include "device/comm/start_barrier_flag.hpp"
#include "device/ptx/flags.cuh"
#include "device/ptx/timer.cuh"
#include "device/remote/timed_wait.cuh"

namespace xstage {

// barrier[0] counts the arrivals; barrier[1] ends as the latest arrival's
// global timer, the one instant every producer knows once all have arrived
// (each raises it before it counts itself in, the fence keeping that order).
// Both zeroed by the host. Returns that instant. The wait is the library's
// timed wait (remote/timed_wait.cuh): on a timeout it fills `record` with
// rank 0, flag kStartBarrierFlag and the arrivals seen against those
// expected, and the producers go on unsynchronised; the host reads the
// record and discards the run.

__device__ inline uint64_t grid_arrive_and_wait(uint64_t* barrier, int producers, uint64_t timeout_ns,
                                                remote::FlagTimeoutRecord* record) {
  atomicMax(reinterpret_cast<unsigned long long*>(barrier + 1), ptx::globaltimer_ns());
  __threadfence();
  atomicAdd(reinterpret_cast<unsigned long long*>(barrier), 1ull);
  const auto arrivals = [barrier] { return ptx::ld_acquire_sys_u64(barrier); };
  remote::wait_geq(arrivals, arrivals(), static_cast<uint64_t>(producers), remote::start_wait(timeout_ns, record),
                   /*rank=*/0, kStartBarrierFlag, /*sleep_ns=*/64);
  return ptx::ld_acquire_sys_u64(barrier + 1);
}

// Spins until the global timer reaches `deadline_ns`.
__device__ inline void spin_until_ns(uint64_t deadline_ns) {
  while (ptx::globaltimer_ns() < deadline_ns) {
  }
}

// Thread 0 meets the other producers; then every thread of the CTA waits
// until `delay_ns` after the latest arrival.
__device__ inline void grid_start_after(uint64_t* barrier, int producers, uint64_t timeout_ns,
                                        remote::FlagTimeoutRecord* record, uint64_t delay_ns) {
  __shared__ uint64_t released_ns;
  if (threadIdx.x == 0) released_ns = grid_arrive_and_wait(barrier, producers, timeout_ns, record);
  __syncthreads();
  spin_until_ns(released_ns + delay_ns);
}

}  // namespace xstage
