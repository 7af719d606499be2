#pragma once
// Launches of the visibility kernels, callable from host C++. Each returns the
// launch's cudaError_t as an int (0 on success); the caller checks it.
#include <cuda_runtime_api.h>

#include "device/visible/visible_params.hpp"

namespace xstage::visible {

size_t producer_smem_bytes(uint32_t bursts);
int launch_producer(const ProducerParams& p, int threads, cudaStream_t stream);
// Blocks of the producer kernel that fit on one SM at once.
int producer_blocks_per_sm(int threads, uint32_t bursts, int* blocks_per_sm);
int launch_poller(const PollerParams& p, int threads, cudaStream_t stream);
int launch_ping_responder(const PingParams& p, cudaStream_t stream);
int launch_timer_resolution(uint64_t* out, uint64_t max_ns, cudaStream_t stream);
int launch_verify(const ProducerParams& p, unsigned long long* mismatches, cudaStream_t stream);
// Loads every kernel above on the current device (cudaFuncGetAttributes):
// under lazy loading a kernel's first launch waits until no kernel runs, and
// on the local path the poller runs beside the producer and the verify kernel.
int preload_kernels();

}  // namespace xstage::visible
