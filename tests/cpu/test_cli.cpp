// The command end to end: what a user types, what comes back, and the exit code.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "xstage/model/model.hpp"

using nlohmann::json;

TEST(Cli, PredictJsonHasTheModelKeys) {
  const CliRun r = run_cli("predict --profile h200-host-pcie --K 32 --V 2MiB --G 20us --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto start = r.out.find('{');
  ASSERT_NE(start, std::string::npos) << r.out;
  const json j = json::parse(r.out.substr(start));
  for (const char* k : {"t_iss_ns", "regime", "onset_gap_ns"}) EXPECT_TRUE(j.contains(k)) << k;
  const auto& p = *xstage::find_embedded_profile("h200-host-pcie");
  EXPECT_NEAR(j["t_iss_ns"].get<double>(), xstage::predict(p, 32, 2 * 1048576.0, 20000).t_iss_ns, 1e-6);
}

TEST(Cli, PredictTableAndCsv) {
  const CliRun t = run_cli("predict --K 8 --V 4e6 --G 1.5ms");
  ASSERT_EQ(t.rc, 0) << t.out;
  EXPECT_NE(t.out.find("T_iss"), std::string::npos);
  const CliRun c = run_cli("predict --K 8 --V 4e6 --G 0 --csv");
  ASSERT_EQ(c.rc, 0) << c.out;
  EXPECT_NE(c.out.find("\nprofile,K,V_bytes,gap_ns,t0_ns,drain_ns,t_iss_ns,regime,"), std::string::npos) << c.out;
}

TEST(Cli, BadInputGivesOneClearLineAndNonZeroExit) {
  struct Case {
    const char* args;
    const char* fragment;
  } cases[] = {
      {"predict --K 8 --V -2MiB --G 1us", "--V: '-2MiB' is negative"},
      {"predict --K 8 --V 0 --G 1us", "--V: '0' is zero"},
      {"predict --K 0 --V 1MiB --G 1us", "--K: expected a whole number in [1, 65536]"},
      {"predict --K 8 --V 1MiB --G 3parsecs", "unknown unit"},
      {"predict --K 8 --V 1MiB", "--G: missing; expected it given"},
      {"predict --K 8 --V 1MiB --G 1us --frobnicate", "frobnicate"},
      {"predict --K 8 --V --G 1us", ""},
      {"predict --profile /nonexistent.json --K 8 --V 1MiB --G 1us", "no such file"},
      {"fit /nonexistent.csv -o /tmp/x.json", "/nonexistent.csv: cannot open"},
      {"nosuchcommand", ""},
      {"simulate --K 4 --V 1MiB --G 1us --stagger=-1us", "--stagger: '-1us' is negative"},
      {"simulate --schedule /nonexistent.csv --stagger 1us", "--stagger: not used with --schedule"},
      {"probe --stagger 1us", "--stagger: expected with a custom sweep"},
      {"probe --K 8 --V 1MiB --G 0 --stagger 2parsecs", "--stagger"},
      {"probe --K 8 --V 1MiB --G 0 --stagger 2s", "--stagger: '2s' is"},
  };
  for (const auto& c : cases) {
    const CliRun r = run_cli(c.args);
    EXPECT_NE(r.rc, 0) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.fragment), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("internal error"), std::string::npos) << c.args << "\n" << r.out;
  }
}

TEST(Cli, HelpOnEveryCommand) {
  for (const char* sub : {"", "report", "predict", "simulate", "fit", "profiles"}) {
    const CliRun r = run_cli(std::string(sub) + " --help");
    EXPECT_EQ(r.rc, 0) << sub << "\n" << r.out;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << sub;
  }
}

TEST(Cli, ProfilesListsEmbedded) {
  const CliRun r = run_cli("profiles");
  ASSERT_EQ(r.rc, 0) << r.out;
  for (const char* n : {"h200-host-pcie", "h200-nvlink4-nominal", "b200-nvlink5-nominal"})
    EXPECT_NE(r.out.find(n), std::string::npos) << n;
  const CliRun j = run_cli("profiles --json");
  ASSERT_EQ(j.rc, 0);
  EXPECT_GE(json::parse(j.out).size(), 3u);
}

TEST(Cli, SimulatePeriodicAndSchedule) {
  const CliRun r = run_cli("simulate --K 16 --V 1MiB --G 5us --bursts 400 --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  const json j = json::parse(r.out.substr(r.out.find('{')));
  EXPECT_NEAR(j["steady_issue_ns"].get<double>(), j["model_t_iss_ns"].get<double>(),
              0.02 * j["model_t_iss_ns"].get<double>());
  const std::string sched = ::testing::TempDir() + "/sched.csv";
  std::ofstream(sched) << "producer,kind,amount\n0,store,4MiB\n0,compute,10us\n0,store,4MiB\n1,store,1MiB\n";
  const std::string tl = ::testing::TempDir() + "/timeline.csv";
  const CliRun s = run_cli("simulate --schedule " + sched + " --timeline " + tl);
  ASSERT_EQ(s.rc, 0) << s.out;
  EXPECT_NE(s.out.find("first 3 of 3 bursts"), std::string::npos) << s.out;
  std::ifstream t(tl);
  std::string header;
  std::getline(t, header);
  EXPECT_EQ(header, "t_ns,occupancy_bytes,stage");
}

TEST(Cli, FitEndToEnd) {
  // Samples drawn from a known profile; the fitter must write a profile that predicts them.
  const auto& truth = *xstage::find_embedded_profile("h200-host-pcie");
  const std::string csv = ::testing::TempDir() + "/samples.csv";
  {
    std::ofstream f(csv);
    f << "# transport: host\n# device: synthetic\nstat,K,V_bytes,gap_ns,issue_ns\n";
    for (double K : {8.0, 32.0, 132.0})
      for (double V : {262144.0, 1048576.0, 8388608.0})
        for (double G : {0.0, 10e3, 40e3, 100e3, 400e3})
          f << "run," << K << "," << V << "," << G << "," << xstage::predict(truth, K, V, G).t_iss_ns << "\n";
  }
  const std::string out = ::testing::TempDir() + "/fitted.json";
  const CliRun r = run_cli("fit " + csv + " -o " + out + " --bootstrap 4");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("rel_err"), std::string::npos);
  const CliRun p = run_cli("predict --profile " + out + " --K 32 --V 1MiB --G 10us --json");
  ASSERT_EQ(p.rc, 0) << p.out;
  const json j = json::parse(p.out.substr(p.out.find('{')));
  const double want = xstage::predict(truth, 32, 1048576.0, 10e3).t_iss_ns;
  EXPECT_NEAR(j["t_iss_ns"].get<double>(), want, 0.02 * want);
  // Outside the fitted K range: a warning.
  const CliRun w = run_cli("predict --profile " + out + " --K 1000 --V 1MiB --G 10us");
  EXPECT_EQ(w.rc, 0);
  EXPECT_NE(w.out.find("warning: K = 1000 is outside"), std::string::npos) << w.out;
  // A malformed CSV: line number and reason, and no profile written.
  const std::string bad = ::testing::TempDir() + "/bad.csv";
  std::ofstream(bad) << "K,V_bytes,gap_ns,issue_ns\n4,65536,0,100\n4,65536,zero,100\n";
  const std::string none = ::testing::TempDir() + "/never.json";
  std::remove(none.c_str());
  const CliRun b = run_cli("fit " + bad + " -o " + none);
  EXPECT_NE(b.rc, 0);
  EXPECT_NE(b.out.find(bad + ":3: column 3 'gap_ns'"), std::string::npos) << b.out;
  EXPECT_FALSE(std::ifstream(none).good());
}

TEST(Cli, ReportWithoutGpuPrintsPredictions) {
  const CliRun r = run_cli("report --cpu");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("issue time of one burst against the gap"), std::string::npos);
  EXPECT_NE(r.out.find("regime boundaries"), std::string::npos);
  EXPECT_NE(r.out.find("simulated"), std::string::npos);
}

TEST(Cli, ValidateWritesTheFilesOtherToolsRead) {
  // A probe-shaped CSV drawn from a known profile: validate must refit it and
  // write probe-validation.json with the keys the probe issue names.
  const auto& truth = *xstage::find_embedded_profile("h200-host-pcie");
  const std::string dir = ::testing::TempDir() + "/validate-cmd";
  const std::string csv = ::testing::TempDir() + "/probe-host.csv";
  {
    std::ofstream f(csv);
    f << "# transport: host\n# device: synthetic\n# driver: none\n# sm_clock_mhz_measured: 1980\n"
         "# date: 2026-11-30T00:00:00Z\n# commit: test\n# command: synthetic\n# copy_engine_Bps: 5.5e10\n"
         "set,stat,K,V_bytes,gap_ns,issue_ns,bursts,steady_from\n";
    auto rows = [&](const char* set, std::vector<double> Ks, std::vector<double> Vs, std::vector<double> Gs) {
      for (double K : Ks)
        for (double V : Vs)
          for (double G : Gs)
            f << set << ",run," << K << "," << V << "," << G << ","
              << xstage::windowed_issue_ns(truth, K, V, G, 0, 96) << ",96,0\n";
    };
    rows("train", {16, 66, 132}, {262144.0, 1048576.0, 4194304.0, 16777216.0, 67108864.0},
         {0, 1e3, 4e3, 16e3, 64e3, 256e3, 1024e3, 2048e3});
    rows("holdout", {132}, {393216.0, 1572864.0, 6291456.0}, {0, 2e3, 8e3, 32e3, 128e3, 512e3});
  }
  const CliRun r = run_cli("validate " + csv + " -o " + dir + " --bootstrap 2");
  ASSERT_EQ(r.rc, 0) << r.out;
  std::ifstream in(dir + "/probe-validation.json");
  ASSERT_TRUE(in.good());
  const json j = json::parse(in);
  ASSERT_EQ(j["transports"].size(), 1u);
  const json& t = j["transports"][0];
  for (const char* k : {"transport", "R_Bps", "Q_bytes", "copy_engine_Bps", "onset_gap_err", "models"})
    EXPECT_TRUE(t.contains(k)) << k;
  for (const char* m : {"burst_gap", "completion_coupled", "unbounded_async"}) {
    EXPECT_TRUE(t["models"][m].contains("median_rel_err")) << m;
    EXPECT_TRUE(t["models"][m].contains("p90_rel_err")) << m;
  }
  // Data drawn from the model itself: the refit predicts the held-out rows closely.
  EXPECT_LT(t["models"]["burst_gap"]["median_rel_err"].get<double>(), 0.02);
  EXPECT_NEAR(t["R_Bps"].get<double>(), truth.R_Bps, 0.03 * truth.R_Bps);
  EXPECT_TRUE(std::ifstream(dir + "/profile-host.json").good());
  // A CSV without its provenance lines is refused with the reason.
  const std::string bare = ::testing::TempDir() + "/bare.csv";
  std::ofstream(bare) << "K,V_bytes,gap_ns,issue_ns,set\n1,65536,0,100,holdout\n";
  const CliRun b = run_cli("validate " + bare + " -o " + dir);
  EXPECT_NE(b.rc, 0);
  EXPECT_NE(b.out.find("no '# transport:' line"), std::string::npos) << b.out;
}
