#include "device/comm/wait_flag.hpp"

#include "device/ptx/flags.cuh"
#include "xstage/device.hpp"

namespace xstage::comm {

namespace {
__global__ void sm90_u64_wait_flag_geq(const uint64_t* flag, uint64_t expected, int rank, int flag_id,
                                       uint64_t timeout_ns) {
  ptx::wait_flag_geq(flag, expected, rank, flag_id, timeout_ns);
}
}  // namespace

void launch_wait_flag_geq(const uint64_t* flag, uint64_t expected, int rank, int flag_id, uint64_t timeout_ns,
                          cudaStream_t stream) {
  sm90_u64_wait_flag_geq<<<1, 1, 0, stream>>>(flag, expected, rank, flag_id, timeout_ns);
  XSTAGE_CUDA(cudaGetLastError());
}

}  // namespace xstage::comm
