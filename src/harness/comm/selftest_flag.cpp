#include <cuda_runtime.h>

#include <fmt/format.h>

#include "device/comm/wait_flag.hpp"
#include "harness/comm/selftest.hpp"
#include "runtime/comm/flag_timeout.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/core/units.hpp"

namespace xstage {

void selftest_flag_timeout(uint64_t timeout_ns, int rank, int flag_id) {
  if (cuda_device_count() == 0) throw Error("selftest flag-timeout: no CUDA GPU visible; expected a machine with a GPU");
  if (rank < 0 || flag_id < 0) throw Error("selftest flag-timeout: --rank or --flag negative; expected both >= 0");
  // The flag lives in mapped host memory, as a remote rank's would; nobody sets it.
  void* host = nullptr;
  const size_t bytes = (static_cast<size_t>(flag_id) + 1) * sizeof(uint64_t);
  XSTAGE_CUDA(cudaHostAlloc(&host, bytes, cudaHostAllocMapped));
  auto* flags = static_cast<volatile uint64_t*>(host);
  for (int i = 0; i <= flag_id; ++i) flags[i] = 0;
  void* dev = nullptr;
  XSTAGE_CUDA(cudaHostGetDevicePointer(&dev, host, 0));
  remote::FlagTimeoutRecord* record = nullptr;
  XSTAGE_CUDA(cudaMalloc(&record, sizeof *record));
  XSTAGE_CUDA(cudaMemset(record, 0, sizeof *record));
  const uint64_t expected = 1;
  comm::launch_wait_flag_geq(static_cast<const uint64_t*>(dev) + flag_id, expected, rank, flag_id, timeout_ns,
                             record, nullptr);
  XSTAGE_CUDA(cudaDeviceSynchronize());  // the wait ends by itself: it never traps
  const remote::FlagTimeoutRecord r = fetch_timeout_record(record);
  XSTAGE_CUDA(cudaFree(record));
  XSTAGE_CUDA(cudaFreeHost(host));
  if (r.set == 0)
    throw Error(fmt::format("selftest flag-timeout: rank {} flag {} reached >= {} without anyone setting it: the "
                            "timeout did not fire; expected a timeout after {}",
                            rank, flag_id, expected, format_ns(static_cast<double>(timeout_ns))));
  if (r.rank != rank || r.flag != flag_id || r.expected != expected)
    throw Error(fmt::format("selftest flag-timeout: the record names rank {} flag {} expected {}; expected rank {} "
                            "flag {} expected {}",
                            r.rank, r.flag, r.expected, rank, flag_id, expected));
  throw Error(fmt::format("selftest flag-timeout: rank {} waited on flag {} {}; expected this failure: the wait "
                          "timed out as designed, and the kernel ended and left this record",
                          r.rank, r.flag, timed_out_values(r)));
}

}  // namespace xstage
