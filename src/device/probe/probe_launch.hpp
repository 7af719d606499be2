#pragma once
// Launches of the probe kernels, callable from host C++. Each returns the
// launch's cudaError_t as an int (0 on success); the caller checks it.
// (The .cu side stays free of host libraries: nvcc's front end cannot
// compile fmt's compile-time format checks.)
#include <cuda_runtime_api.h>

#include "device/probe/probe_params.hpp"

namespace xstage::probe {

int launch_bursts(const KernelParams& p, StoreKind s, GapKind g, int blocks, int threads, cudaStream_t stream);
int launch_verify(const uint32_t* dst, uint64_t slot_bytes, uint32_t slots_written, uint32_t slots, uint32_t bursts,
                  uint32_t chunk_bytes, unsigned long long* mismatches, cudaStream_t stream);
// Blocks of the burst kernel that fit on one SM at once (cudaOccupancyMaxActiveBlocksPerMultiprocessor).
int max_resident_blocks(StoreKind s, GapKind g, int threads, size_t dynamic_smem, int* blocks_per_sm);
int launch_calibrate(uint64_t ns, uint64_t* out, cudaStream_t stream);

}  // namespace xstage::probe
