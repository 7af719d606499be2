// The release/acquire flag protocol between two emulated ranks: rank 0 stores
// a payload into rank 1's symmetric buffer with 16-byte stores, then releases
// a flag (st.release.sys); rank 1 acquires it (ld.acquire.sys, with timeout)
// and must see the whole payload. Device and mapped-host placements.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include "device/ptx/flags.cuh"
#include "device/ptx/store.cuh"
#include "device/remote/timed_wait.cuh"
#include "gpu/need_gpus.hpp"
#include "xstage/comm/world.hpp"
#include "xstage/core/device.hpp"

using namespace xstage;

namespace {

constexpr int kThreads = 256;
constexpr int kVectorsPerThread = 64;  // 256 KiB of payload

// Block 0 is the producer (rank 0), block 1 the consumer (rank 1); two CTAs
// are always co-resident, so the consumer's spin cannot starve the producer.
__global__ void sm90_u64_flag_handoff(void* const* buffers, uint64_t* const* flags, unsigned* errors,
                                      uint64_t timeout_ns) {
  auto* payload = static_cast<uint4*>(buffers[1]);
  const int n = kThreads * kVectorsPerThread;
  if (blockIdx.x == 0) {
    for (int i = threadIdx.x; i < n; i += kThreads)
      ptx::st_global_v4_b32(payload + i, make_uint4(i, ~i, i * 3u, 0xC0FFEEu));
    __syncthreads();  // every thread's stores precede thread 0's release (cumulativity)
    if (threadIdx.x == 0) ptx::st_release_sys_u64(flags[1], 1);
  } else {
    __shared__ bool arrived;
    if (threadIdx.x == 0) {
      const uint64_t* flag = flags[1];
      const auto poll = [flag] { return ptx::ld_acquire_sys_u64(flag); };
      arrived = remote::wait_geq(poll, poll(), 1, remote::start_wait(timeout_ns, nullptr), /*rank=*/1, /*flag=*/0);
      if (!arrived) atomicAdd(errors, 1000000u);  // the flag never came: a failure of its own size
    }
    __syncthreads();
    if (!arrived) return;
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const uint4 v = __ldcv(payload + i);  // fetched again, never from a stale line
      if (v.x != unsigned(i) || v.y != ~unsigned(i) || v.z != i * 3u || v.w != 0xC0FFEEu) atomicAdd(errors, 1u);
    }
  }
}

void run_handoff(Placement placement) {
  auto world = World::create({Backend::emulated, 2, placement, 0});
  const SymmetricBuffer& data = world->alloc_symmetric(size_t(kThreads) * kVectorsPerThread * sizeof(uint4));
  const SymmetricBuffer& flags = world->alloc_flags(1);
  unsigned* errors = static_cast<unsigned*>(world->alloc_local(0, sizeof(unsigned)));
  ASSERT_EQ(cudaMemset(errors, 0, sizeof(unsigned)), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  sm90_u64_flag_handoff<<<2, kThreads, 0, world->lead_stream()>>>(
      data.device_table(0), reinterpret_cast<uint64_t* const*>(flags.device_table(0)), errors, 1000000000ull);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(world->lead_stream()), cudaSuccess);
  unsigned host_errors = 1;
  ASSERT_EQ(cudaMemcpy(&host_errors, errors, sizeof host_errors, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host_errors, 0u) << "vectors the consumer saw stale after acquiring the flag";
  uint64_t flag = 0;
  ASSERT_EQ(cudaMemcpy(&flag, flags.flag(1, 0), sizeof flag, cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(flag, 1u);
}

}  // namespace

TEST(FlagsEmulated, ReleaseAcquireHandoffDevice) {
  XSTAGE_NEED_GPUS(1);
  run_handoff(Placement::device);
}

TEST(FlagsEmulated, ReleaseAcquireHandoffHost) {
  XSTAGE_NEED_GPUS(1);
  run_handoff(Placement::host);
}
