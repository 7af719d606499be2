#pragma once
// A contiguous range of destination ranks (first > last: none), shared by
// kernels and host C++.
namespace xstage::remote {

struct RankRange {
  int first, last;
};

}  // namespace xstage::remote
