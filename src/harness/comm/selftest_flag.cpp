#include <cuda_runtime.h>

#include <fmt/format.h>

#include "device/comm/wait_flag.hpp"
#include "harness/comm/selftest.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/core/units.hpp"

namespace xstage {

void selftest_flag_timeout(uint64_t timeout_ns, int rank, int flag_id) {
  if (cuda_device_count() == 0) throw Error("selftest flag-timeout: no CUDA GPU visible; expected a machine with a GPU");
  if (rank < 0 || flag_id < 0) throw Error("selftest flag-timeout: --rank or --flag negative; expected both >= 0");
  // The flags live in mapped host memory: the host can still read what the
  // kernel saw after the trap has destroyed the context.
  void* host = nullptr;
  const size_t bytes = (static_cast<size_t>(flag_id) + 1) * sizeof(uint64_t);
  XSTAGE_CUDA(cudaHostAlloc(&host, bytes, cudaHostAllocMapped));
  auto* flags = static_cast<volatile uint64_t*>(host);
  for (int i = 0; i <= flag_id; ++i) flags[i] = 0;
  void* dev = nullptr;
  XSTAGE_CUDA(cudaHostGetDevicePointer(&dev, host, 0));
  const uint64_t expected = 1;
  comm::launch_wait_flag_geq(static_cast<const uint64_t*>(dev) + flag_id, expected, rank, flag_id, timeout_ns,
                             nullptr);
  const cudaError_t e = cudaDeviceSynchronize();
  const uint64_t seen = flags[flag_id];
  if (e == cudaSuccess)
    throw Error(fmt::format("selftest flag-timeout: rank {} flag {} reached {} (expected >= {}) without anyone "
                            "setting it: the timeout did not fire",
                            rank, flag_id, seen, expected));
  throw Error(fmt::format("selftest flag-timeout: rank {} flag {}: expected >= {}, seen {} after {}; the kernel "
                          "trapped as designed ({})",
                          rank, flag_id, expected, seen, format_ns(static_cast<double>(timeout_ns)),
                          cudaGetErrorString(e)));
}

}  // namespace xstage
