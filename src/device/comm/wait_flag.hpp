#pragma once
// One thread waiting on a flag with the library's timed wait
// (remote/timed_wait.cuh): the flag-timeout selftest, and a building block
// for tests of the flag protocol. And the context preparation every protocol
// whose kernels wait on one another needs.
#include <cuda_runtime.h>

#include <cstdint>

#include "device/remote/flag_timeout_record.hpp"

namespace xstage::comm {

// On a timeout the kernel fills `record` (device memory, zeroed) and ends.
void launch_wait_flag_geq(const uint64_t* flag, uint64_t expected, int rank, int flag_id, uint64_t timeout_ns,
                          remote::FlagTimeoutRecord* record, cudaStream_t stream);

// The first launch in a CUDA context of a kernel that can call printf (no
// library kernel does; a debug print added to one would) sets up the
// context's printf buffer, and holds
// that launch until no kernel runs on the device. A kernel already spinning on
// a flag that such a kernel, launched after it, is to set then waits its whole
// timeout (measured on the H200 with driver 580: docs/RESULTS.md section 10).
// This runs one printf-capable kernel, whose printf is never taken, on the
// current device and waits for it; call it once per device before any kernel
// waits on another. Throws xstage::Error on a CUDA error.
void set_up_printf_buffer(cudaStream_t stream);

}  // namespace xstage::comm
