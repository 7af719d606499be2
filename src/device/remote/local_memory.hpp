#pragma once
// Local memory reserved before any kernel of ours spins on a flag.
//
// A kernel that needs more local memory a thread (its stack frame: spills,
// the timeout printf's arguments) than the context has reserved makes the
// driver grow the reservation when it is launched, and the growth waits for
// the GPU's running kernels. Launched behind a kernel that spins until this
// one (or the host, blocked in the launch) sets its flag, that launch
// deadlocks until the wait times out: the local path of `xstage visible` (the
// producers, 40-byte frames, first launched beside the spinning poller) and
// the MoE layer's peer backend (the fused kernel, 48-56 bytes, enqueued while
// GPU 0's flag wait spun for GPU 1's route, not yet enqueued). Loading a
// kernel (cudaFuncGetAttributes) does not reserve it; a launch does, and the
// reservation is kept. So every runtime object that launches waiting kernels
// reserves once per GPU, while nothing spins, a frame larger than any of its
// kernels' (they check theirs against kReservedLocalBytes when they load).
#include <cstddef>

#include <cuda_runtime_api.h>

namespace xstage::remote {

inline constexpr size_t kReservedLocalBytes = 256;

// Launches a one-warp kernel with a kReservedLocalBytes frame on the current
// device and waits for it. Returns a cudaError_t value.
int reserve_local_memory();

// cudaSuccess when kernel `fn`'s frame fits the reservation, else
// cudaErrorInvalidDeviceFunction (a kernel whose frame grew past it).
int check_local_frame(const void* fn);

}  // namespace xstage::remote
