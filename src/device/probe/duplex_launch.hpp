#pragma once
// The duplex probe's launch, callable from host C++ (returns the cudaError_t
// as an int, 0 on success).
#include <cuda_runtime_api.h>

#include "device/probe/duplex_params.hpp"

namespace xstage::probe {

inline constexpr int kDuplexThreads = 256;  // 8 warps a block
inline constexpr int kDuplexWarps = kDuplexThreads / 32;

// loads_in_flight: 16-byte loads a reader lane keeps in flight, 4 or 8.
int launch_duplex(const DuplexParams& p, int blocks, int loads_in_flight, cudaStream_t stream);

}  // namespace xstage::probe
