#pragma once
// Consecutive rows from row0 (of one tile or one warp) that share a
// destination: the first `run` of them at base + r * pitch; the others (a
// run that straddles a shard boundary, or rows given one by one) need the
// row view's row(). One address computation for many rows instead of one
// for every 16-byte chunk.
#include <cstdint>

#include "device/host_device.hpp"

namespace xstage::remote {

struct RowRun {
  uint16_t* base;
  int64_t pitch;  // elements between consecutive rows of the run
  int run;
  XSTAGE_HD bool covers(int r) const { return r < run; }
};

}  // namespace xstage::remote
