#pragma once
// The host's side of the library's one timed wait (device/remote/timed_wait.cuh):
// a kernel whose wait timed out leaves a FlagTimeoutRecord and ends; the host
// reads it after the launch and says who waited for what. Each client names
// its flags (what rank and flag mean); the values read the same everywhere.
#include <cuda_runtime.h>

#include <string>

#include <fmt/format.h>

#include "device/remote/flag_timeout_record.hpp"
#include "xstage/core/device.hpp"

namespace xstage {

// "for N ns: expected >= E, saw S (block B, thread T)".
inline std::string timed_out_values(const remote::FlagTimeoutRecord& r) {
  return fmt::format("for {} ns: expected >= {}, saw {} (block {}, thread {})", r.waited_ns, r.expected, r.seen,
                     r.block, r.thread);
}

// The record a launch left in device memory (call after the launch's stream
// has been synchronised).
inline remote::FlagTimeoutRecord fetch_timeout_record(const remote::FlagTimeoutRecord* device_record) {
  remote::FlagTimeoutRecord r;
  XSTAGE_CUDA(cudaMemcpy(&r, device_record, sizeof r, cudaMemcpyDeviceToHost));
  return r;
}

}  // namespace xstage
