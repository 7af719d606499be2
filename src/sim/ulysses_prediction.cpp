// Ulysses attention through the X-Stage simulator (include/xstage/ulysses/ulysses_prediction.hpp).
#include "xstage/ulysses/ulysses_prediction.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "xstage/core/error.hpp"
#include "xstage/model/model.hpp"
#include "xstage/model/simulator.hpp"

namespace xstage {

UlyssesTileSchedule ulysses_tile_schedule(const Profile& profile, const UlyssesKernelShape& s, const Profile* local,
                                          const char* who) {
  if (s.tiles < 1 || s.concurrent_tiles < 1)
    throw Error(fmt::format("{}: expected at least one tile and one slot, got {} tiles and {} slots", who, s.tiles,
                            s.concurrent_tiles));
  if (!(s.attention_only_us > 0) || !(s.payload_bytes >= 0))
    throw Error(fmt::format("{}: expected a positive attention-only time and payload, got {} us and {} B", who,
                            s.attention_only_us, s.payload_bytes));
  UlyssesTileSchedule t;
  t.slots = std::min<int64_t>(s.concurrent_tiles, s.tiles);
  // CTAs start in index order and one finishing frees its SM for the next:
  // slot k runs tiles k, k + slots, ...; the time of a tile is the
  // attention-only time over the number of waves.
  t.waves = (s.tiles + t.slots - 1) / t.slots;
  t.full = s.tiles - (t.waves - 1) * t.slots;
  t.tile_bytes = s.payload_bytes / double(s.tiles);
  // The attention-only time already contains each tile's backpressure-free
  // store, into the GPU's own memory (the local path's T0, not the profiled
  // path's); the simulator adds the profiled store back with whatever the
  // stage imposes, so the compute step leaves the local one out.
  const Profile& own = local ? *local : profile;
  const double store_t0 =
      t.tile_bytes > 0 ? t0_iss_ns(own, double(t.slots), t.tile_bytes * double(t.slots)) : 0.0;
  t.tile_ns = std::max(0.0, s.attention_only_us * 1e3 / double(t.waves) - store_t0);
  return t;
}

UlyssesPrediction predict_ulysses(const Profile& profile, const UlyssesKernelShape& s, const Profile* local) {
  const UlyssesTileSchedule ts = ulysses_tile_schedule(profile, s, local, "predict_ulysses");
  const int64_t slots = ts.slots, waves = ts.waves, full = ts.full;
  const double tile_bytes = ts.tile_bytes, tile_ns = ts.tile_ns;
  std::vector<Program> programs;
  programs.reserve(size_t(slots));
  for (int64_t k = 0; k < slots; ++k) {
    Program p;
    p.steps = {Step::compute(tile_ns), Step::store(tile_bytes)};
    p.repeat = k < full ? waves : waves - 1;
    if (p.repeat > 0) programs.push_back(p);
  }
  const SimResult r = simulate(stage_from_profile(profile), programs);
  // The end of a run is what its receivers can know, in units of the
  // profile's latency_ns (the store-to-visibility latency: what a fence after
  // a drained burst still waits). The all-to-all's last stores are complete
  // one latency after their drain (its kernel's end is such a fence). The
  // fused kernel's receivers learn of the last byte from a flag: the writer's
  // fence returns one latency after the drain, then the flag it stores takes
  // another to reach the polling receiver. Nothing sent: nothing to wait for.
  const double latency_ns = s.payload_bytes > 0 ? profile.latency_ns : 0.0;
  UlyssesPrediction out;
  out.fused_us = (std::max(r.total_ns, r.drained_ns) + 2 * latency_ns) * 1e-3;
  out.residual_us = out.fused_us - s.attention_only_us;
  out.sequential_us = s.attention_only_us + (s.payload_bytes / profile.R_Bps * 1e9 + latency_ns) * 1e-3;
  out.stalled_us = r.stalled_ns * 1e-3;
  return out;
}

UlyssesKernelShape ulysses_kernel_shape(const UlyssesShape& shape, bool emulated, int rank, int block_m,
                                        int concurrent_tiles, double attention_only_us) {
  if (block_m < 1) throw Error(fmt::format("ulysses_kernel_shape: expected block_m >= 1, got {}", block_m));
  const UlyssesLayout l(shape);
  if (!emulated && (rank < 0 || rank >= shape.P))
    throw Error(fmt::format("ulysses_kernel_shape: rank {}; expected 0 .. {}", rank, shape.P - 1));
  UlyssesKernelShape ks;
  const int64_t m_blocks = (shape.S + block_m - 1) / block_m;
  ks.tiles = (emulated ? int64_t(shape.P) : 1) * shape.B * l.heads_per_rank() * m_blocks;
  ks.concurrent_tiles = concurrent_tiles;
  ks.attention_only_us = attention_only_us;
  ks.payload_bytes = emulated ? double(l.total_bytes())
                              : double(l.head_shard_bytes()) * double(shape.S - l.seq_rows(rank)) / double(shape.S);
  return ks;
}

}  // namespace xstage
