// What `xstage probe` writes after measuring, all or none (save_probe_run),
// tested with recordings made up on the CPU: the GPU part only hands it text.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>

#include "scratch_files.hpp"
#include "xstage/core/error.hpp"
#include "xstage/probe/probe_fit.hpp"

namespace fs = std::filesystem;
using xstage::ProbeRun;

namespace {

// A probe CSV of one transport as a probe run records it: provenance lines,
// then rows of a clean interconnect, every third held out.
std::string recording(const std::string& transport) {
  std::string csv = "# transport: " + transport +
                    "\n# device: test\n# driver: none\n# date: 2026-01-01\n# commit: none\n# command: none\n"
                    "# copy_engine_Bps: 5e10\n# sm_clock_mhz_measured: 1980\nK,V_bytes,gap_ns,issue_ns,set\n";
  int n = 0;
  for (int K : {8, 32, 132})
    for (double V : {262144.0, 1048576.0, 4194304.0})
      for (double G : {0.0, 5000.0, 20000.0, 100000.0}) {
        double t = std::max(2000 + V / std::min(K * 7e9, 50e9) * 1e9, V / 25e9 * 1e9 - G);
        t *= 1 + 0.02 * ((n * 7919) % 11 - 5) / 5.0;
        std::ostringstream row;
        row << K << "," << V << "," << G << "," << t << (n++ % 3 == 0 ? ",holdout\n" : ",train\n");
        csv += row.str();
      }
  return csv;
}

ProbeRun run_of(const std::string& transport, bool fitted = true) {
  ProbeRun r{transport, recording(transport), "K,V_bytes,gap_ns,burst\n8,4096,0,0\n", std::nullopt};
  if (fitted) r.fit = xstage::fit_probe_csv(r.csv, "probe-" + transport + ".csv", true, 0, "test");
  return r;
}

size_t files_in(const fs::path& d) {
  return size_t(std::distance(fs::directory_iterator(d), fs::directory_iterator()));
}

}  // namespace

TEST(ProbeOutputs, EveryFileOfEveryTransportIsWritten) {
  const fs::path d = scratch_dir("xstage-probe-out-", "all");
  const std::vector<ProbeRun> runs = {run_of("host"), run_of("local", /*fitted=*/false)};
  xstage::save_probe_run(runs, d.string(), "", "test");
  EXPECT_EQ(read_text(d / "probe-host.csv"), runs[0].csv);
  EXPECT_EQ(read_text(d / "probe-local.csv"), runs[1].csv);
  EXPECT_TRUE(fs::exists(d / "profile-host.json"));
  EXPECT_TRUE(fs::exists(d / "validation-host.json"));
  EXPECT_TRUE(fs::exists(d / "probe-validation.json"));
  EXPECT_FALSE(fs::exists(d / "profile-local.json"));  // too few points to fit: the CSV alone
  EXPECT_EQ(files_in(d), 5u);  // nothing aside left behind
  const fs::path b = d / "bursts.csv";
  xstage::save_probe_run({runs[0]}, d.string(), b.string(), "test");
  EXPECT_EQ(read_text(b), runs[0].per_burst_csv);
}

TEST(ProbeOutputs, OneFileThatCannotBeWrittenLeavesTheFolderAsItWas) {
  const fs::path d = scratch_dir("xstage-probe-out-", "none");
  write_text(d / "probe-host.csv", "old");
  write_text(d / "profile-host.json", "old");
  // The second transport's profile cannot be written: a folder has its name.
  fs::create_directories(d / "profile-peer.json");
  EXPECT_THROW(xstage::save_probe_run({run_of("host"), run_of("peer")}, d.string(), "", "test"), xstage::Error);
  EXPECT_EQ(read_text(d / "probe-host.csv"), "old");
  EXPECT_EQ(read_text(d / "profile-host.json"), "old");
  EXPECT_FALSE(fs::exists(d / "probe-peer.csv"));
  EXPECT_EQ(files_in(d), 3u);
  // Two transports' bursts in one file could not be told apart: refused, nothing written.
  try {
    xstage::save_probe_run({run_of("host"), run_of("local")}, d.string(), (d / "b.csv").string(), "test");
    ADD_FAILURE() << "no error";
  } catch (const xstage::Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 transports measured; expected one"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_text(d / "probe-host.csv"), "old");
  EXPECT_EQ(files_in(d), 3u);
  // Two runs of one transport would replace each other's files.
  EXPECT_THROW(xstage::save_probe_run({run_of("host"), run_of("host")}, d.string(), "", "test"), xstage::Error);
  EXPECT_EQ(read_text(d / "probe-host.csv"), "old");
}
