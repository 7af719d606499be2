// What --json and --csv print for programs (docs/cli-output.md): the same keys
// and columns on every run, whatever the input leaves out. Each command runs
// on inputs that exercise its optional fields (a profile with and without the
// near queue and the cold start, a fit with and without uncertainties, R
// identified or not, a validation with and without an onset, a periodic and a
// scheduled simulation, ...) and the key sets are compared.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "cli_runner.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// stdout alone (warnings and progress go to stderr), and the exit status.
CliRun run_stdout(const std::string& args) { return run_cli(args, /*with_stderr=*/false); }

json json_of(const std::string& args) {
  const CliRun r = run_stdout(args + " --json");
  EXPECT_EQ(r.rc, 0) << args;
  try {
    return json::parse(r.out);  // the whole of stdout: nothing but the JSON
  } catch (const json::exception& e) {
    ADD_FAILURE() << args << " --json: " << e.what() << "\n" << r.out;
    return json();
  }
}

std::string csv_header(const std::string& args) {
  const CliRun r = run_stdout(args + " --csv");
  EXPECT_EQ(r.rc, 0) << args;
  return r.out.substr(0, r.out.find('\n'));
}

std::set<std::string> keys(const json& j) {
  std::set<std::string> k;
  for (auto it = j.begin(); it != j.end(); ++it) k.insert(it.key());
  return k;
}

// The same keys at every level. A null stands for a value or a whole object
// that is absent (sigma without uncertainties); an array's elements all have
// the keys of its first element (of either side).
void expect_same_keys(const json& a, const json& b, const std::string& where) {
  if (a.is_null() || b.is_null()) return;
  if (a.is_object() != b.is_object() || a.is_array() != b.is_array()) {
    ADD_FAILURE() << where << ": an object or a list on one side, not on the other: " << a.dump() << " vs "
                  << b.dump();
    return;
  }
  if (a.is_object()) {
    EXPECT_EQ(keys(a), keys(b)) << where;
    for (auto it = a.begin(); it != a.end(); ++it)
      if (b.contains(it.key())) expect_same_keys(it.value(), b[it.key()], where + "." + it.key());
    return;
  }
  if (a.is_array()) {
    const json* first = !a.empty() ? &a[0] : !b.empty() ? &b[0] : nullptr;
    if (!first) return;
    for (const json& x : a) expect_same_keys(*first, x, where + "[]");
    for (const json& x : b) expect_same_keys(*first, x, where + "[]");
  }
}

fs::path scratch(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("xstage-keys-" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// Samples of a stage draining at 25 GB/s (or never: `drain_limited` false)
// behind an issue rate of min(K x 7 GB/s, 50 GB/s); with `holdout`, the K = 32
// series held out and the probe CSV's provenance lines.
std::string samples_csv(bool drain_limited, bool holdout) {
  std::string s = holdout ? "# transport: host\n# device: test\n# driver: none\n# date: 2026-01-01\n# commit: none\n"
                            "# command: none\n# copy_engine_Bps: 5e10\n# sm_clock_mhz_measured: 1980\n"
                          : "";
  s += holdout ? "K,V_bytes,gap_ns,issue_ns,set\n" : "K,V_bytes,gap_ns,issue_ns\n";
  int n = 0;
  for (int K : {8, 32, 132})
    for (double V : {262144.0, 1048576.0, 4194304.0})
      for (double G : {0.0, 5000.0, 20000.0, 50000.0, 100000.0, 200000.0}) {
        double t = 2000 + V / std::min(K * 7e9, 50e9) * 1e9;
        if (drain_limited) t = std::max(t, V / 25e9 * 1e9 - G);
        t *= 1 + 0.02 * ((n * 7919) % 11 - 5) / 5.0;
        s += std::to_string(K) + "," + std::to_string(V) + "," + std::to_string(G) + "," + std::to_string(t);
        if (holdout) s += K == 32 ? ",holdout" : ",train";
        s += "\n";
        ++n;
      }
  return s;
}

}  // namespace

TEST(OutputKeys, ProfilesWithAndWithoutTheExtensionsHaveTheSameKeys) {
  // h200-host-pcie: near queue, cold start, uncertainties; the nominal ones: none of them, no ranges.
  const json all = json_of("profiles");
  ASSERT_TRUE(all.is_array());
  ASSERT_GE(all.size(), 2u);
  bool with_near = false, without_near = false;
  for (const json& p : all) {
    expect_same_keys(all[0], p, p.value("name", "?"));
    (p["t0"]["near_bytes"].is_null() ? without_near : with_near) = true;
  }
  EXPECT_TRUE(with_near && without_near) << "the embedded profiles no longer exercise both forms";
  const json near = json_of("profiles --show h200-host-pcie"), plain = json_of("profiles --show h200-nvlink4-nominal");
  EXPECT_EQ(keys(near), keys(plain));
  EXPECT_EQ(keys(near["t0"]), keys(plain["t0"]));
  EXPECT_TRUE(plain["Q_cold_bytes"].is_null());
  EXPECT_TRUE(plain["sigma"].is_null());
  EXPECT_EQ(keys(near["sigma"]), (std::set<std::string>{"fixed_ns", "per_producer_Bps", "aggregate_Bps", "R_Bps",
                                                         "Q_bytes", "Q_fill_bytes", "near_bytes",
                                                         "near_per_producer_Bps", "Q_cold_bytes", "Q_warm_per_byte"}));
  EXPECT_EQ(csv_header("profiles --show h200-host-pcie"), csv_header("profiles --show h200-nvlink4-nominal"));
  EXPECT_EQ(csv_header("profiles"), csv_header("profiles --show h200-local"));
}

TEST(OutputKeys, PredictSameKeysInEveryRegimeAndWithOrWithoutARun) {
  const std::string near = "--profile h200-host-pcie", plain = "--profile h200-nvlink4-nominal";
  const std::vector<std::string> cases = {
      near + " --K 16 --V 1MiB --G 1us",                // drain
      near + " --K 16 --V 1MiB --G 1ms --bursts 50",     // free, with a run mean
      plain + " --K 4 --V 64MiB --G 0",                  // beyond capacity: no onset gap
      plain + " --K 132 --V 4KiB --G 10us --bursts 3"};
  const json first = json_of("predict " + cases[0]);
  EXPECT_TRUE(first["run_mean_t_iss_ns"].is_null());
  for (const auto& c : cases) {
    expect_same_keys(first, json_of("predict " + c), c);
    EXPECT_EQ(csv_header("predict " + cases[0]), csv_header("predict " + c)) << c;
  }
  // The CSV's columns are the JSON's keys.
  std::set<std::string> columns;
  std::string header = csv_header("predict " + cases[0]) + ",";
  for (size_t a = 0, b; (b = header.find(',', a)) != std::string::npos; a = b + 1) columns.insert(header.substr(a, b - a));
  EXPECT_EQ(columns, keys(first));
}

TEST(OutputKeys, SimulatePeriodicAndScheduleHaveTheSameKeys) {
  const fs::path d = scratch("simulate");
  write(d / "s.csv", "producer,kind,amount\n0,store,1MiB\n0,compute,2us\n1,store,256KiB\n");
  const json periodic = json_of("simulate --K 8 --V 1MiB --G 2us --bursts 20");
  const json sched = json_of("simulate --schedule " + (d / "s.csv").string());
  expect_same_keys(periodic, sched, "simulate");
  EXPECT_TRUE(sched["steady_issue_ns"].is_null());
  EXPECT_EQ(csv_header("simulate --K 8 --V 1MiB --G 2us --bursts 20"),
            csv_header("simulate --schedule " + (d / "s.csv").string()));
}

TEST(OutputKeys, ReportWithAndWithoutTheNearQueue) {
  const json near = json_of("report --cpu --K 16"), plain = json_of("report --cpu --K 16 --profile h200-nvlink4-nominal");
  expect_same_keys(near, plain, "report");
  EXPECT_FALSE(near["profile"]["t0"]["near_bytes"].is_null());
  EXPECT_TRUE(plain["profile"]["t0"]["near_bytes"].is_null());
  EXPECT_EQ(csv_header("report --cpu"), csv_header("report --cpu --profile h200-nvlink4-nominal"));
}

TEST(OutputKeys, FitWithAndWithoutUncertaintiesAndIdentifiedR) {
  const fs::path d = scratch("fit");
  write(d / "drain.csv", samples_csv(true, false));
  write(d / "free.csv", samples_csv(false, false));
  auto fit = [&](const char* in, int bootstrap) {
    return "fit " + (d / in).string() + " -o " + (d / "p.json").string() + " --bootstrap " + std::to_string(bootstrap);
  };
  const json a = json_of(fit("drain.csv", 4)), b = json_of(fit("free.csv", 0)), c = json_of(fit("free.csv", 4));
  expect_same_keys(a, b, "fit");
  expect_same_keys(a, c, "fit");
  EXPECT_TRUE(b["profile"]["sigma"].is_null());
  EXPECT_TRUE(c["profile"]["sigma"]["R_Bps"].is_null());  // R not identified: no uncertainty
  EXPECT_FALSE(c["identified"]["R"].get<bool>());
  // The profile file holds the keys --json shows.
  std::ifstream f(d / "p.json");
  expect_same_keys(a["profile"], json::parse(f), "fit -o");
  EXPECT_EQ(csv_header(fit("drain.csv", 0)), csv_header(fit("free.csv", 0)));
}

TEST(OutputKeys, ValidateWithAndWithoutAnOnset) {
  const fs::path d = scratch("validate");
  fs::create_directories(d / "a");
  fs::create_directories(d / "b");
  write(d / "a" / "probe-host.csv", samples_csv(true, true));
  write(d / "b" / "probe-host.csv", samples_csv(false, true));
  auto validate = [&](const char* in) {
    return "validate " + (d / in / "probe-host.csv").string() + " -o " + (d / in / "out").string() + " --bootstrap 2";
  };
  const json a = json_of(validate("a")), b = json_of(validate("b"));
  expect_same_keys(a, b, "validate");
  EXPECT_FALSE(a["transports"][0]["onset_gap_err"].is_null()) << a.dump(2);
  EXPECT_TRUE(b["transports"][0]["onset_gap_err"].is_null());
  EXPECT_EQ(csv_header(validate("a")), csv_header(validate("b")));
  // The files it writes: the same keys too.
  std::ifstream fa(d / "a" / "out" / "validation-host.json"), fb(d / "b" / "out" / "validation-host.json");
  expect_same_keys(json::parse(fa), json::parse(fb), "validation-host.json");
}

TEST(OutputKeys, UlyssesPredictWithAndWithoutMeasuredTimes) {
  const fs::path d = scratch("ulysses");
  write(d / "r.json", R"({"block_m": 128, "concurrent_tiles": 132, "profile": "h200-host-pcie", "rows": [{"P": 8,
    "B": 1, "H": 24, "D": 128, "backend": "emulated", "placement": "host"}], "summary": [
    {"S": 4096, "attention_only_us": 300, "fused_us": null}, {"S": 8192, "attention_only_us": 900, "fused_us": 1000,
    "sequential_us": 1500}]})");
  const std::string recorded = XSTAGE_SOURCE_DIR "/results/h200/ulysses/ulysses.json";
  const json a = json_of("ulysses-predict " + recorded), b = json_of("ulysses-predict " + (d / "r.json").string());
  expect_same_keys(a, b, "ulysses-predict");
  EXPECT_TRUE(b["rows"][0]["fused_us"].is_null());
  EXPECT_TRUE(b["rows"][0]["residual"].is_null());
  EXPECT_EQ(csv_header("ulysses-predict " + recorded), csv_header("ulysses-predict " + (d / "r.json").string()));
  // Every row's CSV line has as many cells as the header.
  const CliRun c = run_stdout("ulysses-predict " + (d / "r.json").string() + " --csv");
  size_t lines = 0;
  for (size_t a0 = 0, b0; (b0 = c.out.find('\n', a0)) != std::string::npos; a0 = b0 + 1, ++lines) {
    const std::string line = c.out.substr(a0, b0 - a0);
    EXPECT_EQ(std::count(line.begin(), line.end(), ','), 11) << line;
  }
  EXPECT_EQ(lines, 3u) << c.out;
}

TEST(OutputKeys, EveryCommandThatPrintsAResultHasJsonAndCsv) {
  // The GPU commands cannot run here; their flags can be read. (launch and
  // selftest print no result.)
  for (const char* cmd : {"report", "predict", "simulate", "fit", "validate", "profiles", "ulysses-predict", "probe",
                          "a2a", "attn", "ulysses", "moe-gemm", "moe", "visible", "duplex"}) {
    const CliRun r = run_stdout(std::string("help ") + cmd);
    EXPECT_EQ(r.rc, 0) << cmd;
    EXPECT_NE(r.out.find("--json"), std::string::npos) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find("--csv"), std::string::npos) << cmd << "\n" << r.out;
  }
}
