// The duplex probe (xstage/probe/duplex.hpp) on the GPU: every store lands, and
// the rates are those of a link (each direction alone at least as fast as
// with the other running; both together no more than the two alone).
#include <gtest/gtest.h>

#include "need_gpus.hpp"
#include "xstage/core/error.hpp"
#include "xstage/probe/duplex.hpp"

using namespace xstage;

namespace {

void expect_link(const DuplexRates& r, double lo_Bps, const char* path) {
  EXPECT_EQ(r.store_mismatches, 0u) << path;
  EXPECT_GT(r.checked_vectors, 0u) << path;
  for (double v : {r.read_alone_Bps, r.store_alone_Bps, r.read_both_Bps, r.store_both_Bps})
    EXPECT_GT(v, lo_Bps) << path;
  EXPECT_LE(r.read_both_Bps, 1.15 * r.read_alone_Bps) << path;
  EXPECT_LE(r.store_both_Bps, 1.15 * r.store_alone_Bps) << path;
  EXPECT_NEAR(r.both_Bps, r.read_both_Bps + r.store_both_Bps, 1e-6 * r.both_Bps) << path;
  EXPECT_LE(r.both_Bps, 1.15 * (r.read_alone_Bps + r.store_alone_Bps)) << path;
  EXPECT_GT(r.overlap, 0.5) << path;  // equal bytes each way: the two ran together
  EXPECT_GT(r.blocks, 0) << path;
}

}  // namespace

TEST(DuplexGpu, HostAndLocalPaths) {
  XSTAGE_NEED_GPUS(1);
  DuplexConfig c;
  c.bytes = 32ull << 20;
  c.reps = 3;
  c.blocks_per_sm = 1;
  c.read_warps = 3;
  c.path = DuplexPath::host;
  expect_link(measure_duplex(c), 1e9, "host");  // PCIe: tens of GB/s
  c.path = DuplexPath::local;
  c.bytes = 256ull << 20;  // at TB/s a run must still span many %globaltimer steps
  expect_link(measure_duplex(c), 100e9, "local");  // HBM: TB/s
}

TEST(DuplexGpu, PeerPath) {
  XSTAGE_NEED_GPUS(2);
  DuplexConfig c;
  c.bytes = 64ull << 20;
  c.reps = 3;
  c.path = DuplexPath::peer;
  expect_link(measure_duplex(c), 10e9, "peer");
}

TEST(DuplexGpu, BadConfigurationsSayWhat) {
  DuplexConfig c;
  c.bytes = 17;
  EXPECT_THROW(validate(c), Error);
  c = DuplexConfig{};
  c.read_warps = kDuplexWarpsPerBlock;
  EXPECT_THROW(validate(c), Error);
  c = DuplexConfig{};
  c.device = 1 << 20;  // no such GPU: an error naming the need, before any allocation
  EXPECT_THROW(measure_duplex(c), Error);
}
