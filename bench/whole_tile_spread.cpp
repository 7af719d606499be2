// How the simulator spreads CTAs that run the fused kernel's whole-tile store
// path (perf-log f19): 132 CTAs, each `tiles` times: wait until the stage has
// drained every byte stored before (after the K/V steps already in the ring),
// compute the tile, store its 32 KiB. Slot c's tile time is (1 + s u_c) t,
// u_c evenly over [-1, 1]; for each s it prints the run, the period a tile
// and how far apart the CTAs' last bursts end, in tiles.
//   usage: whole_tile_spread TILE_US TILES KV_STEPS [PROFILE]   (e.g. 51.6 6 32)
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "xstage/core/error.hpp"
#include "xstage/model/profile.hpp"
#include "xstage/model/simulator.hpp"

using namespace xstage;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s TILE_US TILES KV_STEPS [PROFILE]\n", argv[0]);
    return 2;
  }
  const double tile_ns = std::atof(argv[1]) * 1e3;
  const int tiles = std::atoi(argv[2]), kv_steps = std::atoi(argv[3]);
  if (!(tile_ns > 0) || tiles < 1 || kv_steps < 2) {
    std::fprintf(stderr, "expected TILE_US > 0, TILES >= 1, KV_STEPS >= 2\n");
    return 2;
  }
  try {
    const Profile p = load_profile(argc > 4 ? argv[4] : "h200-host-pcie");
    const int K = 132;
    const double ahead = 2.0 / kv_steps;  // the K/V ring's two stages at D = 128
    for (double s : {0.0, 1e-9, 1e-6, 1e-4, 1e-2}) {
      std::vector<Program> progs;
      for (int c = 0; c < K; ++c) {
        const double t = tile_ns * (1 + s * (2.0 * c / (K - 1) - 1));
        Program pr;
        pr.steps = {Step::wait_drain(t * ahead), Step::compute(t * (1 - ahead)), Step::store(32768)};
        pr.repeat = tiles;
        progs.push_back(pr);
      }
      const SimResult r = simulate(stage_from_profile(p), progs);
      std::map<int, double> last;
      for (const BurstSpan& b : r.bursts) last[b.producer] = std::max(last[b.producer], b.end_ns);
      double lo = 1e300, hi = 0;
      for (const auto& [k, v] : last) lo = std::min(lo, v), hi = std::max(hi, v);
      std::printf("s=%-6g run %9.1f us  period %7.1f us a tile  last bursts %.3f tiles apart\n", s, r.total_ns / 1e3,
                  r.total_ns / 1e3 / tiles, (hi - lo) / tile_ns);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "whole_tile_spread: %s\n", e.what());
    return 1;
  }
}
