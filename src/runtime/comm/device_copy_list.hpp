#pragma once
// A Copy2D list uploaded to one GPU, ready to launch as one kernel.
#include <cuda_runtime.h>

#include <vector>

#include "device/comm/copy2d_list.hpp"

namespace xstage {

class DeviceCopyList {
 public:
  DeviceCopyList(int device, const std::vector<comm::Copy2D>& list);
  ~DeviceCopyList();
  DeviceCopyList(const DeviceCopyList&) = delete;
  DeviceCopyList& operator=(const DeviceCopyList&) = delete;
  void launch(cudaStream_t stream) const;  // on `device`
  int vector_bytes() const { return vector_bytes_; }

 private:
  int device_;
  void* mem_ = nullptr;  // the list, then the row prefix sums
  int n_ = 0;
  uint64_t rows_ = 0;
  int vector_bytes_ = 16;
  int blocks_ = 1;
};

}  // namespace xstage
