#include "xstage/core/device.hpp"

#include <cuda_runtime.h>

#include <fstream>
#include <regex>
#include <sstream>

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

namespace {
std::string driver_version() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::stringstream ss;
  ss << f.rdbuf();
  std::smatch m;
  const std::string s = ss.str();
  if (std::regex_search(s, m, std::regex(R"((\d+\.\d+(\.\d+)?))"))) return m[1];
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
