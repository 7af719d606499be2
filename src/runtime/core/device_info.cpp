#include "xstage/core/device.hpp"

#include <cuda_runtime.h>

#include <fstream>
#include <sstream>
#include <string_view>

#include <fmt/format.h>

#include "xstage/core/error.hpp"

namespace xstage {

void check_cuda(int status, const char* what, const char* file, int line) {
  if (status == cudaSuccess) return;
  const auto e = static_cast<cudaError_t>(status);
  throw Error(fmt::format("{}: {} ({}:{})", what, cudaGetErrorString(e), file, line));
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

std::string first_version_number(std::string_view s) {
  auto digits_from = [&](size_t i) {
    size_t j = i;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    return j;
  };
  for (size_t i = 0; i < s.size();) {
    if (s[i] < '0' || s[i] > '9') {
      ++i;
      continue;
    }
    const size_t run_end = digits_from(i);
    // A run of digits, a dot and digits: the version; a second dot and digits extend it.
    if (run_end + 1 < s.size() && s[run_end] == '.' && digits_from(run_end + 1) > run_end + 1) {
      size_t end = digits_from(run_end + 1);
      if (end + 1 < s.size() && s[end] == '.' && digits_from(end + 1) > end + 1) end = digits_from(end + 1);
      return std::string(s.substr(i, end - i));
    }
    i = run_end;
  }
  return "";
}

namespace {
std::string driver_version() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::stringstream ss;
  ss << f.rdbuf();
  if (std::string v = first_version_number(ss.str()); !v.empty()) return v;
  int v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess) return fmt::format("cuda-driver-api-{}", v);
  return "unknown";
}
}  // namespace

DeviceInfo device_info(int index) {
  cudaDeviceProp prop{};
  XSTAGE_CUDA(cudaGetDeviceProperties(&prop, index));
  DeviceInfo d;
  d.index = index;
  d.name = prop.name;
  d.driver = driver_version();
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.sm_count = prop.multiProcessorCount;
  int khz = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, index) == cudaSuccess) d.sm_clock_mhz = khz / 1000.0;
  d.memory_bytes = prop.totalGlobalMem;
  return d;
}

}  // namespace xstage
