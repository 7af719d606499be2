#pragma once
// Parameters of the table-ordered tile scheduler (sched/ordered.cuh), shared
// with host C++: order[src * m_blocks + i] is the m-block a source rank
// computes i-th within every (b, head). The linear order is the identity; the
// rank-rotated order interleaves destinations.
namespace xstage::sched {

struct OrderedSchedulerParams {
  const int* order = nullptr;  // [P * m_blocks] device array
  int batch = 1;
  int rank_base = 0;
};

}  // namespace xstage::sched
