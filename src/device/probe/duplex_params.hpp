#pragma once
// Parameters of the duplex probe (src/device/probe/duplex.cu): SMs read a
// far buffer and store into another at once, as the fused MoE kernel's row
// copies and L2 stores do, so that the two directions of one link are timed
// together (docs/model.md, section 9). Plain data; no CUDA types.
#include <cstdint>

namespace xstage::probe {

struct DuplexParams {
  const void* read_src = nullptr;  // far memory the reader warps load (16-byte vectors)
  void* store_dst = nullptr;       // far memory the storer warps store
  uint64_t read_bytes = 0;         // multiples of 16
  uint64_t store_bytes = 0;
  int read_warps = 0;              // warps of each block that read; the rest of the block stores
  // Per role (0 read, 1 store): the earliest start and the latest end over
  // the grid (%globaltimer ns); the host sets them to ~0 and 0 before a launch.
  unsigned long long* span = nullptr;  // [4]: read start, read end, store start, store end
  unsigned long long* sink = nullptr;  // where the loaded data goes, so that the loads are not dropped
  uint32_t salt = 0;  // vector i holds (i + salt, +1, +2, +3): each run's stores differ from the last's
};

}  // namespace xstage::probe
