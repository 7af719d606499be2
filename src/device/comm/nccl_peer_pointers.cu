#include "device/comm/nccl_peer_pointers.hpp"

#include <nccl_device.h>

#include "xstage/core/device.hpp"

namespace xstage::comm {

namespace {
__global__ void sm90_nccl_peer_pointers(ncclWindow_t window, int ranks, void** out) {
  for (int peer = threadIdx.x; peer < ranks; peer += blockDim.x)
    out[peer] = window->lsaFlatBase == nullptr ? nullptr : ncclGetPeerPointer(window, 0, peer);
}
}  // namespace

void launch_nccl_peer_pointers(ncclWindow_t window, int ranks, void** out, cudaStream_t stream) {
  sm90_nccl_peer_pointers<<<1, 32, 0, stream>>>(window, ranks, out);
  XSTAGE_CUDA(cudaGetLastError());
}

}  // namespace xstage::comm
