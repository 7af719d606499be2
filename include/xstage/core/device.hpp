#pragma once
// What GPU (if any) this process sees. Safe to call on a machine without a GPU
// or without a driver: it then reports zero devices.
#include <string>
#include <string_view>

namespace xstage {

struct DeviceInfo {
  int index = 0;
  std::string name;       // "NVIDIA H200"
  std::string driver;     // "580.159.04", from /proc/driver/nvidia/version
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  double sm_clock_mhz = 0;  // the clock the runtime reports (boost), not a reading under load
  size_t memory_bytes = 0;
};

int cuda_device_count();  // 0 where there is no usable GPU
DeviceInfo device_info(int index);

// The first "A.B" or "A.B.C" of decimal digits in s ("" if none): the driver's
// version in /proc/driver/nvidia/version.
std::string first_version_number(std::string_view s);

// Throws xstage::Error "<what>: <cuda error string> (<file>:<line>)" on failure.
void check_cuda(int status, const char* what, const char* file, int line);
#define XSTAGE_CUDA(call) ::xstage::check_cuda(static_cast<int>(call), #call, __FILE__, __LINE__)

}  // namespace xstage
