#pragma once
// The fused Ulysses kernel's store paths through the X-Stage simulator
// (docs/model.md, section 8). CPU only.
//
// predict_ulysses (ulysses_prediction.hpp) stores each tile's bytes as one
// burst after its compute, whatever the store path. Here each path has its
// own issue schedule, taken from the kernel's structure
// (docs/design/ulysses.md, "The epilogue"):
// - whole tile (vector16, bulk): the consumer warps store the tile's rows in
//   one burst at its end and stall while the stage is full. The next tile's
//   K/V loads are issued behind those stores: when a CTA's burst is larger
//   than the profile's near queue (the bytes a producer's own store queue
//   takes at once), the CTA's mainloop goes on only for the K/V steps already
//   in its ring and then waits until the stage has drained what was stored
//   before it (Step::wait_drain, first in, first out).
// - paced (the consumers) and paced-warp / paced-bulk (a producer warp): the
//   tile's rows go out in m slices, one every n/m KV steps of the next tile's
//   mainloop; the CTA's last tile goes at once, at its exit. A slice fits the
//   near queue, so it does not hold the loads up.
// - bulk copies (bulk, paced-bulk) drain the path at `bulk_drain_ratio` of
//   the 16-byte stores' R, measured by the probe (`bulk_drain_ratio` below),
//   not fitted to the kernel.
// What the X-Stage does not explain, the path's own instructions (paced's
// sends between the GEMMs, the sender warp's handshake), is a separate term:
// OwnCost, the residual a path measures with buffers whose stage drains so
// fast that it is nothing else (device memory, 4 TB/s) less what the model
// predicts there, as a fraction of attention-only time. It is a calibration
// from other rows than the ones it is applied to (host, peer).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "xstage/model/profile.hpp"
#include "xstage/ulysses/ulysses_prediction.hpp"

namespace xstage {

// The store paths the model knows, by their `--stores` names.
const std::vector<std::string>& modelled_store_paths();

struct StorePathSchedule {
  bool sliced = false;           // paced, paced-bulk, paced-warp: slices over the next tile's mainloop
  bool bulk_copies = false;      // bulk, paced-bulk: TMA bulk copies (their own drain rate)
  bool producer_sent = false;    // paced-bulk, paced-warp: a producer warp sends (the consumers do not issue)
};
// Throws xstage::Error naming the known paths for any other name.
StorePathSchedule store_path_schedule(const std::string& path);

struct StorePathKernel {
  UlyssesKernelShape kernel;
  int64_t kv_steps = 1;        // KV steps a tile's mainloop takes: ceil(S / block_n)
  int prefetch_steps = 2;      // K/V ring depth: steps whose loads are issued before the tile's stores
  int tile_rows = 128;         // rows a tile sends
  int paced_rows = 16;         // the kernel's smallest slice (--paced-rows)
};
// The wgmma kernel's shape at head dim D (block_n = 128; a ring of 2 stages
// at D = 128, 4 at D = 64: config_wgmma.cuh) for sequence length S.
StorePathKernel wgmma_store_path_kernel(const UlyssesKernelShape& kernel, int64_t S, int64_t D);

struct StorePathOptions {
  double bulk_drain_ratio = 1.0;  // R of bulk copies over R of 16-byte stores on the profiled path
  bool load_coupling = true;      // whole-tile bursts beyond the near queue hold the next tile's loads
};

struct StorePathPrediction {
  double fused_us = 0;        // the X-Stage's part: receivers know the last byte (as predict_ulysses)
  double residual = 0;        // fused / attention-only - 1, before the own cost
  double stalled_us = 0;      // issuers' stall summed over CTAs
  double drain_wait_us = 0;   // loads held behind stores, summed over CTAs
  int slices = 1;             // sends a tile (1: whole tile)
};

// `local`: as predict_ulysses. Throws xstage::Error for an unknown path or a bad shape.
StorePathPrediction predict_store_path(const Profile& profile, const StorePathKernel& k, const std::string& path,
                                       const StorePathOptions& opt = {}, const Profile* local = nullptr);

// A path's own cost (fraction of attention-only time) against S, from
// calibration rows. At an S between two calibrated ones: interpolated in
// log S; outside them: the nearest one's. No row for the path: 0.
class OwnCost {
 public:
  void add(const std::string& path, int64_t S, double fraction);
  bool empty() const { return by_path_.empty(); }
  bool has(const std::string& path) const { return by_path_.count(path) > 0; }
  double at(const std::string& path, int64_t S) const;

 private:
  std::map<std::string, std::map<int64_t, double>> by_path_;
};

// R of bulk copies over R of 16-byte stores, from a probe CSV (`xstage probe
// -o`): over every (K, V, gap, gap kind spin) point with a `run` row of both
// store kinds (bulk and v4), the ratio of the mean sustained rates. Throws
// xstage::Error when the file has no such pair.
double bulk_drain_ratio_from_probe(const std::string& csv_text, const std::string& name);

// How well predicted values rank against measured ones (one entry a path).
struct RankAgreement {
  int n = 0;                  // paths
  double spearman = 0;        // Spearman's rho (average ranks for ties); NaN for n < 2
  int pairs = 0;               // path pairs whose measured values differ
  double agreed = 0;           // of those, pairs the prediction orders as measured (a predicted tie: half)
  int resolved_pairs = 0;      // the pairs measured more than `tie` apart
  double resolved_agreed = 0;
};
RankAgreement rank_agreement(const std::vector<double>& measured, const std::vector<double>& predicted,
                             double tie = 0.0);

}  // namespace xstage
