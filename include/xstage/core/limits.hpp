#pragma once
// Bounds on sizes the library accepts, so that a typo (a missing unit, an
// extra zero) ends in a clear xstage::Error instead of gigabytes of memory,
// hours of simulation, or arithmetic that silently loses meaning. Each bound
// is far beyond what a real GPU run needs.
namespace xstage {

// Producers (CTAs) storing at once: an H200 runs at most 132 SMs x 32 CTAs;
// the simulator keeps about 100 bytes per producer.
inline constexpr int kMaxProducers = 65536;

// Bytes of one burst or one schedule: 1 PB. A double still resolves a
// fraction of a byte there, and no GPU memory is within a factor 1000 of it.
inline constexpr double kMaxBytes = 1e15;

// Times (gaps, compute steps, a whole schedule): 1e15 ns, about 11.6 days.
// Beyond that a double's step exceeds a nanosecond and short stores would
// vanish into the rounding of the clock.
inline constexpr double kMaxTimeNs = 1e15;

// Bursts one simulation may run (over all producers): at a few million
// bursts a second, under a minute of simulation. The simulator's memory does not
// grow with bursts (summaries are computed on the fly); its time does.
inline constexpr double kMaxSimulatedBursts = 1e8;

}  // namespace xstage
