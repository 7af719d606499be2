#pragma once
// One thread waiting on a flag with ptx::wait_flag_geq: the flag-timeout
// selftest, and a building block for tests of the flag protocol.
#include <cuda_runtime.h>

#include <cstdint>

namespace xstage::comm {

void launch_wait_flag_geq(const uint64_t* flag, uint64_t expected, int rank, int flag_id, uint64_t timeout_ns,
                          cudaStream_t stream);

}  // namespace xstage::comm
