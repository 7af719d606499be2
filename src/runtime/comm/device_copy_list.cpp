#include "device_copy_list.hpp"

#include <algorithm>
#include <cstring>

#include "xstage/core/device.hpp"

namespace xstage {

DeviceCopyList::DeviceCopyList(int device, const std::vector<comm::Copy2D>& list)
    : device_(device), n_(static_cast<int>(list.size())) {
  std::vector<uint64_t> row_start(list.size() + 1, 0);
  for (size_t i = 0; i < list.size(); ++i) row_start[i + 1] = row_start[i] + list[i].height;
  rows_ = row_start.back();
  vector_bytes_ = comm::copy2d_vector_bytes(list.data(), list.size());
  if (n_ == 0) return;

  const size_t list_bytes = list.size() * sizeof(comm::Copy2D);
  std::vector<char> staged(list_bytes + row_start.size() * sizeof(uint64_t));
  std::memcpy(staged.data(), list.data(), list_bytes);
  std::memcpy(staged.data() + list_bytes, row_start.data(), row_start.size() * sizeof(uint64_t));
  XSTAGE_CUDA(cudaSetDevice(device_));
  XSTAGE_CUDA(cudaMalloc(&mem_, staged.size()));
  XSTAGE_CUDA(cudaMemcpy(mem_, staged.data(), staged.size(), cudaMemcpyHostToDevice));
  XSTAGE_CUDA(cudaDeviceSynchronize());  // landed before a launch on a non-blocking stream reads it

  // Enough warps to keep many stores in flight on every SM, no more than rows.
  int sms = 1;
  XSTAGE_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_));
  const uint64_t warps_per_block = comm::kCopy2DThreads / 32;
  blocks_ = static_cast<int>(std::min<uint64_t>((rows_ + warps_per_block - 1) / warps_per_block, 4ull * sms));
  blocks_ = std::max(blocks_, 1);
}

DeviceCopyList::~DeviceCopyList() {
  if (!mem_) return;
  (void)cudaSetDevice(device_);
  (void)cudaFree(mem_);
}

void DeviceCopyList::launch(cudaStream_t stream) const {
  if (n_ == 0) return;
  XSTAGE_CUDA(cudaSetDevice(device_));
  const auto* list = static_cast<const comm::Copy2D*>(mem_);
  const auto* row_start = reinterpret_cast<const uint64_t*>(static_cast<const char*>(mem_) + n_ * sizeof(comm::Copy2D));
  comm::launch_copy2d_list(list, row_start, n_, rows_, vector_bytes_, blocks_, stream);
}

}  // namespace xstage
