#include "device/visible/visible_kernels.cuh"
#include "device/visible/visible_launch.hpp"

namespace xstage::visible {

namespace {
int allow_smem(const void* fn, size_t smem) {
  if (smem <= 48 * 1024) return 0;
  return static_cast<int>(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
}
}  // namespace

size_t producer_smem_bytes(uint32_t bursts) { return sizeof(uint64_t) * 3 * bursts; }

int launch_producer(const ProducerParams& p, int threads, cudaStream_t stream) {
  const size_t smem = producer_smem_bytes(p.bursts);
  if (const int e = allow_smem(reinterpret_cast<const void*>(sm90_visible_producer), smem)) return e;
  sm90_visible_producer<<<p.K, threads, smem, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

int producer_blocks_per_sm(int threads, uint32_t bursts, int* blocks_per_sm) {
  const size_t smem = producer_smem_bytes(bursts);
  if (const int e = allow_smem(reinterpret_cast<const void*>(sm90_visible_producer), smem)) return e;
  return static_cast<int>(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, sm90_visible_producer, threads, smem));
}

int launch_poller(const PollerParams& p, int threads, cudaStream_t stream) {
  visible_poller<<<1, threads, sizeof(uint32_t) * p.K, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

int launch_ping_responder(const PingParams& p, cudaStream_t stream) {
  ping_responder<<<1, 1, 0, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

int launch_timer_resolution(uint64_t* out, uint64_t max_ns, cudaStream_t stream) {
  timer_resolution<<<1, 1, 0, stream>>>(out, max_ns);
  return static_cast<int>(cudaGetLastError());
}

int launch_verify(const ProducerParams& p, unsigned long long* mismatches, cudaStream_t stream) {
  visible_verify<<<264, 256, 0, stream>>>(p, mismatches);
  return static_cast<int>(cudaGetLastError());
}

int preload_kernels() {
  cudaFuncAttributes a{};
  for (const void* fn :
       {reinterpret_cast<const void*>(sm90_visible_producer), reinterpret_cast<const void*>(visible_poller),
        reinterpret_cast<const void*>(ping_responder), reinterpret_cast<const void*>(timer_resolution),
        reinterpret_cast<const void*>(visible_verify)})
    if (const cudaError_t e = cudaFuncGetAttributes(&a, fn); e != cudaSuccess) return static_cast<int>(e);
  return 0;
}

}  // namespace xstage::visible
