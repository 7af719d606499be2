#pragma once
// Resolves a symmetric NCCL window into the device addresses of every rank's
// copy, as this process's GPU sees them (ncclGetPeerPointer runs on the device
// only: the window descriptor lives in device memory).
#include <cuda_runtime.h>
#include <nccl.h>

namespace xstage::comm {

// out: device array of `ranks` pointers; an entry is nullptr when the window
// has no load/store mapping (it fell back to a local registration).
void launch_nccl_peer_pointers(ncclWindow_t window, int ranks, void** out, cudaStream_t stream);

}  // namespace xstage::comm
