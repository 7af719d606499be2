#pragma once
// Diagnostics of the remote-store layer: parts of a fused kernel's end left
// out, or time-stamped, to see what they cost (docs/perf-log.md, f9, f10).
// Bits 1 and 2 change the kernel's memory ordering (a run with them is not a
// result: its data is not guaranteed to have arrived), so every diagnostic is
// compiled in only with -DXSTAGE_DIAGNOSTICS=ON (CMake option, off in the
// library build); without it the bits are ignored and the host refuses them.
#include "device/host_device.hpp"

namespace xstage::remote {

#ifdef XSTAGE_DIAGNOSTICS
inline constexpr bool kDiagnostics = true;
#else
inline constexpr bool kDiagnostics = false;
#endif

inline constexpr unsigned int kDiagNoWait = 1;          // no receiver wait at the end
inline constexpr unsigned int kDiagNoAcquireFence = 2;  // the wait ends without its acquire fence
inline constexpr unsigned int kDiagTrace = 128;         // time stamps of the kernel's end into p.trace
inline constexpr unsigned int kDiagSlowPoll = 256;      // the receiver polls every ~2 us, not ~64 ns
inline constexpr unsigned int kDiagTileTrace = 512;     // each tile's end into p.trace (16-byte and bulk paths)
inline constexpr unsigned int kDiagAll =
    kDiagNoWait | kDiagNoAcquireFence | kDiagTrace | kDiagSlowPoll | kDiagTileTrace;

// The trace's slots (wait_trace.cuh): one a CTA, then the waiting CTA's,
// then (kDiagTileTrace) kTileTraceMax tile ends a CTA.
inline constexpr int kTraceMaxGrid = 4096, kTraceSlots = 8, kTileTraceMax = 256;

// Whether diagnostic bit `bit` is set and compiled in.
template <class Params>
XSTAGE_HD constexpr bool diag(const Params& p, unsigned int bit) {
  if constexpr (kDiagnostics)
    return (p.experiment & bit) != 0;
  else
    return false;
}

}  // namespace xstage::remote
