#pragma once
// What the Burst-Gap profile predicts for Ulysses attention, with no
// refitting (docs/design/ulysses.md, "Model in the loop"). CPU only.
//
// The fused kernel is fed to the X-Stage simulator as the GPU runs it: K
// concurrent tile slots, each computing its tiles one after another (the
// attention-only time split evenly over the waves, less the backpressure-free
// issue time T0 of the tile's local store, which that time contains; the
// simulator adds the profiled path's store back with any stall) and storing
// each tile's output (its bytes) right after computing it.
// The run ends when the receivers know the last byte is visible: drained by
// the stage, then a flag stored after a fence (two store-to-visibility
// latencies of the profile). The sequential variant is attention-only plus
// the whole payload at the drain rate R, plus one latency (its last stores
// complete).
#include <cstdint>

#include "xstage/model/profile.hpp"
#include "xstage/ulysses/ulysses_layout.hpp"

namespace xstage {

struct UlyssesKernelShape {
  int64_t tiles = 0;          // tiles the GPU computes (all emulated ranks together)
  int concurrent_tiles = 0;   // CTAs resident at once (SMs x CTAs per SM)
  double payload_bytes = 0;   // bytes the GPU's tiles send, over all destinations
  double attention_only_us = 0;  // measured time of the same kernel with the local epilogue
};

struct UlyssesPrediction {
  double fused_us = 0;       // receivers know the last byte arrived (drained + 2 latency_ns)
  double residual_us = 0;    // fused - attention-only
  double sequential_us = 0;  // attention-only + payload / R + latency_ns
  double stalled_us = 0;     // summed over tiles: time the issuers lost to a full stage
};

// How the kernel's tiles fall on its CTAs: slot k runs tiles k, k + slots,
// ...; `full` slots run `waves` tiles, the others one fewer. A tile computes
// for the attention-only time over the waves less its local store's T0.
struct UlyssesTileSchedule {
  int64_t slots = 0, waves = 0, full = 0;
  double tile_bytes = 0, tile_ns = 0;
};
// Throws xstage::Error (naming `who`) for a shape with no tiles, slots or time.
UlyssesTileSchedule ulysses_tile_schedule(const Profile& profile, const UlyssesKernelShape& shape,
                                          const Profile* local, const char* who);

// `local`: the profile of the attention-only run's own store path (the GPU's
// memory); nullptr: `profile` itself, right where both are the same path. The
// attention-only time contains that local store's T0, not the profiled path's,
// so only the T0 taken out of each tile comes from it.
// Throws xstage::Error for a shape with no tiles, slots or time.
UlyssesPrediction predict_ulysses(const Profile& profile, const UlyssesKernelShape& shape,
                                  const Profile* local = nullptr);

// The kernel shape of one GPU of a Ulysses run, from the problem alone.
// emulated: all P ranks run on the GPU and every destination is the
// placement's memory (the whole payload goes through one stage); else one
// rank a GPU (`rank`), and only the rows the other ranks own cross the link.
UlyssesKernelShape ulysses_kernel_shape(const UlyssesShape& shape, bool emulated, int rank, int block_m,
                                        int concurrent_tiles, double attention_only_us);

}  // namespace xstage
