#pragma once
// The dynamic shared memory above 48 KiB a kernel asks for is an opt-in per
// function and per device: a process that drives several GPUs (the peer
// backend) sets it on each. `done` is the caller's mask of devices already
// set for `fn` (one static mask per instantiation); a failed set is retried.
#include <cstdint>

#include <cuda_runtime.h>

namespace xstage::gemm {

template <class Kernel>
int opt_in_shared_memory(Kernel* fn, size_t bytes, int device, uint64_t& done) {
  const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
  if (bit != 0 && (done & bit) != 0) return 0;
  const cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  if (e != cudaSuccess) return int(e);
  done |= bit;
  return 0;
}

}  // namespace xstage::gemm
