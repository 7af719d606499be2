#pragma once
// The flag index a timed-out start barrier (grid_start.cuh) records, so that
// the host can tell it from a flag of the measured run (which are >= 0).
namespace xstage {

inline constexpr int kStartBarrierFlag = -1;

}  // namespace xstage
