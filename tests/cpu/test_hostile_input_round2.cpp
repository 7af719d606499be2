// Hostile input, round two (issue 41): every reproducer of the issue, as the
// command a careless or hostile user typed. Each ends in one line
// `xstage: error: <where>: <what>; expected <what>` and exit 2, or in a
// correct result, quickly and within bounded memory; none loses data.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_runner.hpp"
#include "scratch_files.hpp"

namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) { return scratch_dir("xstage-hostile2-", name); }
void write(const fs::path& p, const std::string& text) { write_text(p, text); }
std::string read(const fs::path& p) { return read_text(p); }

// K, V and G on a grid, the issue time of a stage draining at 25 GB/s behind
// an issue rate of min(K x 7 GB/s, 50 GB/s), with a small spread.
std::string samples_csv(double issue_scale = 1) {
  std::string s = "K,V_bytes,gap_ns,issue_ns\n";
  int n = 0;
  for (int K : {8, 32, 132})
    for (double V : {262144.0, 1048576.0, 4194304.0})
      for (double G : {0.0, 5000.0, 20000.0, 100000.0}) {
        double t = std::max(2000 + V / std::min(K * 7e9, 50e9) * 1e9, V / 25e9 * 1e9 - G);
        t *= (1 + 0.02 * ((n++ * 7919) % 11 - 5) / 5.0) * issue_scale;
        s += std::to_string(K) + "," + std::to_string(V) + "," + std::to_string(G) + "," + std::to_string(t) + "\n";
      }
  return s;
}

// A probe CSV (validate's input) of one transport: the samples above, every
// third row held out, with the provenance lines validate needs.
std::string probe_csv(const std::string& transport = "host", const std::string& copy_engine = "5e10") {
  std::string csv = "# transport: " + transport +
                    "\n# device: test\n# driver: none\n# date: 2026-01-01\n# commit: none\n# command: none\n"
                    "# copy_engine_Bps: " + copy_engine + "\n# sm_clock_mhz_measured: 1980\n";
  std::istringstream lines(samples_csv());
  std::string line;
  std::getline(lines, line);
  csv += line + ",set\n";
  for (int i = 0; std::getline(lines, line); ++i) csv += line + (i % 3 == 0 ? ",holdout\n" : ",train\n");
  return csv;
}

// The documented form: one line on stderr, exit 2, no parser boilerplate.
void expect_documented_error(const std::string& args, const std::string& fragment) {
  const CliRun r = run_cli(args);
  EXPECT_EQ(r.rc, 2) << args << "\n" << r.out;
  EXPECT_NE(r.out.find(fragment), std::string::npos) << args << "\n" << r.out;
  const size_t at = r.out.find("xstage: error: ");
  EXPECT_NE(at, std::string::npos) << args << "\n" << r.out;
  if (at != std::string::npos) {
    const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
    EXPECT_NE(line.find("; expected"), std::string::npos) << args << "\n" << line;
    EXPECT_LE(line.size(), 800u) << args;
  }
  EXPECT_EQ(r.out.find("internal error"), std::string::npos) << args << "\n" << r.out;
  EXPECT_EQ(r.out.find("Run with --help"), std::string::npos) << args << "\n" << r.out;
}

std::string fmt_row(int K, double V, double G, double t) {
  std::ostringstream o;
  o.precision(17);
  o << K << "," << V << "," << G << "," << t << "\n";
  return o.str();
}

// A shell command line as it is (pipes), stdout and stderr together.
CliRun run_sh(const std::string& cmd) {
  CliRun r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

double seconds_of(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// ---- One reader: /dev/zero and friends refused, everything read under a cap

TEST(BoundedInput, DevicesAreRefusedByEveryReader) {
  const fs::path d = scratch("devzero");
  write(d / "r.json", R"({"block_m": 128, "concurrent_tiles": 132, "profile": "/dev/zero", "rows": [{"P": 8,
    "B": 1, "H": 24, "D": 128, "backend": "emulated", "placement": "host"}], "summary": [
    {"S": 4096, "attention_only_us": 300, "fused_us": null}]})");
  const std::string p = (d / "p.json").string();
  for (const std::string& args : {
           std::string("predict --profile /dev/zero --K 1 --V 1 --G 1"),
           std::string("report --cpu --profile /dev/zero"),
           std::string("profiles --show /dev/zero"),
           std::string("ulysses-predict /dev/zero"),
           std::string("moe-predict /dev/zero"),
           std::string("attn --q /dev/zero --k /dev/zero --v /dev/zero"),
           std::string("moe --shape deepseek-v3 --ranks 2 --x /dev/zero --dry-run"),
           std::string("fit /dev/zero -o ") + p,
           std::string("simulate --schedule /dev/zero"),
           std::string("ulysses-predict ") + (d / "r.json").string(),
       }) {
    double s = seconds_of([&] { expect_documented_error(args, "is a device"); });
    EXPECT_LT(s, 10) << args;
  }
  EXPECT_FALSE(fs::exists(p));
}

TEST(BoundedInput, DocumentsOverTheCapAreRefusedFileOrPipe) {
  const fs::path d = scratch("cap");
  // A sparse 65 MiB file: refused from its size, before it is read.
  {
    std::ofstream f(d / "big.json");
  }
  fs::resize_file(d / "big.json", (uint64_t(64) << 20) + 1);
  expect_documented_error("profiles --show " + (d / "big.json").string(), "at most 64 MiB");
  // A pipe says nothing of its length: read until it passes the cap.
  const double s = seconds_of([&] {
    const CliRun r = run_sh("head -c 100000000 /dev/zero | " + xstage_cli_path() + " profiles --show /dev/stdin");
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find("more than 64 MiB"), std::string::npos) << r.out;
  });
  EXPECT_LT(s, 30);
}

TEST(BoundedInput, StreamedCsvLinesHaveACap) {
  const fs::path d = scratch("line");
  const std::string p = (d / "p.json").string();
  // /dev/zero through a pipe: no line break ever; the samples reader stops at 1 MiB.
  const CliRun r = run_cli("fit /dev/stdin -o " + p + " < /dev/zero");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("is a device"), std::string::npos) << r.out;
  const CliRun pipe = run_sh("head -c 3000000 /dev/zero | " + xstage_cli_path() + " fit /dev/stdin -o " + p);
  EXPECT_EQ(pipe.rc, 2) << pipe.out;
  EXPECT_NE(pipe.out.find("without a line break"), std::string::npos) << pipe.out;
  write(d / "long.csv", "K,V_bytes,gap_ns,issue_ns\n" + std::string(3 << 20, '1') + "\n");
  expect_documented_error("fit " + (d / "long.csv").string() + " -o " + p, "without a line break");
  EXPECT_FALSE(fs::exists(p));
}

// ---- One writer

TEST(OneWriter, DevStdoutKeepsItsOrderWithTheTable) {
  const fs::path d = scratch("stdout");
  write(d / "s.csv", samples_csv());
  for (const std::string& name : {"/dev/stdout", "-"}) {
    const fs::path out = d / "out.txt";
    const CliRun r = run_cli("fit " + (d / "s.csv").string() + " -o " + name + " --bootstrap 0 > " + out.string());
    ASSERT_EQ(r.rc, 0) << r.out;
    const std::string text = read(out);
    const size_t profile = text.find("\"R_Bps\""), table = text.find("wrote " + name);
    EXPECT_NE(profile, std::string::npos) << name << "\n" << text;
    EXPECT_NE(table, std::string::npos) << name << "\n" << text;
    EXPECT_LT(profile, table) << text;
  }
  const fs::path tl = d / "tl.txt";
  const CliRun s = run_cli("simulate --K 2 --V 1MiB --G 1us --bursts 3 --timeline /dev/stdout > " + tl.string());
  ASSERT_EQ(s.rc, 0) << s.out;
  const std::string text = read(tl);
  EXPECT_NE(text.find("t_ns,occupancy_bytes,stage"), std::string::npos) << text;
  EXPECT_NE(text.find("steady-state issue time"), std::string::npos) << text;
}

TEST(OneWriter, TwoOutputsOntoOneFileAndOutputsOntoInputsAreRefusedBeforeWork) {
  const fs::path d = scratch("same");
  const std::string same = (d / "same.csv").string();
  expect_documented_error("simulate --K 2 --V 1MiB --G 1us --bursts 3 --timeline " + same + " --bursts-out " + same,
                          "one file for two outputs");
  EXPECT_FALSE(fs::exists(same));
  expect_documented_error("simulate --K 2 --V 1MiB --G 1us --bursts 3 --timeline - --bursts-out /dev/stdout",
                          "one file for two outputs");
  // probe --bursts-out onto a file its folder gets: refused before the GPU is looked for.
  expect_documented_error("probe --K 8 --V 1MiB --G 0 --bursts-out " + (d / "probe-host.csv").string() + " -o " +
                              d.string(),
                          "one file for two outputs");
  // /dev/null takes both without mixing anything up.
  EXPECT_EQ(run_cli("simulate --K 2 --V 1MiB --G 1us --bursts 3 --timeline /dev/null --bursts-out /dev/null").rc, 0);
  // validate d/profile-host.json -o d: the input is one of the files it writes.
  write(d / "profile-host.json", probe_csv());
  const std::string before = read(d / "profile-host.json");
  expect_documented_error("validate " + (d / "profile-host.json").string() + " -o " + d.string() + " --bootstrap 0",
                          "refusing to overwrite an input");
  EXPECT_EQ(read(d / "profile-host.json"), before);
  // The GPU commands' plain-stream writers: checked before any GPU work.
  for (const char* n : {"q.npy", "k.npy", "v.npy", "x.npy"}) write(d / n, "not read");
  expect_documented_error("attn --q " + (d / "q.npy").string() + " --k " + (d / "k.npy").string() + " --v " +
                              (d / "v.npy").string() + " --o " + (d / "q.npy").string(),
                          "refusing to overwrite an input");
  expect_documented_error("moe-gemm --x " + (d / "x.npy").string() + " --out " + (d / "x.npy").string(),
                          "refusing to overwrite an input");
  expect_documented_error("ulysses --dump " + (d / "x.npy").string(), "cannot make this folder");
  EXPECT_EQ(read(d / "x.npy"), "not read");
  // A new name in /dev is no file to make; an empty name is no file at all.
  const CliRun r = run_cli("fit " + (d / "profile-host.json").string() + " -o /dev/xstage-new-name-41");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_FALSE(fs::exists("/dev/xstage-new-name-41"));
  fs::remove("/dev/xstage-new-name-41");
  expect_documented_error("simulate --K 2 --V 1MiB --G 1us --bursts 3 --timeline ''", "empty value");
}

TEST(OneWriter, ValidateWritesAllItsFilesOrNone) {
  const fs::path d = scratch("allornone");
  write(d / "good.csv", probe_csv("host"));
  write(d / "binary.csv", std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16));
  const fs::path out = d / "out";
  expect_documented_error("validate " + (d / "good.csv").string() + " " + (d / "binary.csv").string() + " -o " +
                              out.string() + " --bootstrap 0",
                          "binary.csv");
  EXPECT_TRUE(fs::is_empty(out)) << "validate left files behind";
  // Two CSVs of one transport would replace each other's files.
  write(d / "again.csv", probe_csv("host"));
  expect_documented_error("validate " + (d / "good.csv").string() + " " + (d / "again.csv").string() + " -o " +
                              out.string() + " --bootstrap 0",
                          "both measure the transport 'host'");
  EXPECT_TRUE(fs::is_empty(out));
  // The transport names files: a path is no transport.
  write(d / "path.csv", probe_csv("../../escape"));
  expect_documented_error("validate " + (d / "path.csv").string() + " -o " + out.string() + " --bootstrap 0",
                          "# transport: ../../escape");
  EXPECT_TRUE(fs::is_empty(out));
}

// ---- Bounded work

TEST(BoundedWork, MoePredictIsRefusedBeyondItsTileCapQuickly) {
  for (const std::string& args : {
           std::string("moe-predict --shape deepseek-v3 --tokens 1048576 --P 256"),
           std::string("moe-predict --shape deepseek-v3 --tokens 65536 --P 256"),
           std::string("moe-predict --shape deepseek-v3 --tokens 16384 --P 64"),
           std::string("moe-predict --shape 1048576/1048576/65536/65536 --tokens 16777216 --P 1024 --json"),
       }) {
    const double s = seconds_of([&] { expect_documented_error(args, "GEMM tiles"); });
    EXPECT_LT(s, 5) << args;
  }
  // Below the cap it answers, with byte counts that add up (no wrapped int).
  const CliRun r = run_cli("moe-predict --shape deepseek-v3 --tokens 4096 --P 8 --json", false);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("\"bytes_dispatch\": 0,"), std::string::npos) << r.out.substr(0, 2000);
}

TEST(BoundedWork, SimulateShowAndLaunchCountsAreBounded) {
  expect_documented_error("simulate --K 2 --V 1MiB --G 1us --show 2000000000", "--show");
  expect_documented_error("launch -n 100000 -- /bin/true", "-n 100000");
  expect_documented_error("launch -n 0 -- /bin/true", "-n 0");
}

// ---- Silent nonsense

TEST(SilentNonsense2, NonFiniteTinyAndUnusedValuesAreRefused) {
  const fs::path d = scratch("nonsense");
  expect_documented_error("moe-predict --grid --tie nan", "not a finite number");
  expect_documented_error("moe-predict --shape deepseek-v3 --tokens 1024 --P 2 --compute-only-ms nan",
                          "not a finite number");
  expect_documented_error("moe-predict --grid --tile m1n1", "--tile: not used with --grid");
  write(d / "s.csv", "producer,kind,amount\n0,store,4096\n0,compute,100\n");
  expect_documented_error("simulate --schedule " + (d / "s.csv").string() + " --V garbage --G garbage",
                          "not used with --schedule");
  expect_documented_error("simulate --K 2 --V 1e-300 --G 1us", "less than one byte");
  // Issue times of 1e-300 ns: no 300-digit error, no +inf%.
  std::string tiny = "K,V_bytes,gap_ns,issue_ns\n8,4096,0,1e-300\n";
  write(d / "tiny.csv", tiny);
  expect_documented_error("fit " + (d / "tiny.csv").string() + " -o " + (d / "p.json").string(), "issue_ns");
  // The copy engine's rate in a probe CSV.
  for (const char* ce : {"inf", "1e-300", "nan"}) {
    write(d / "probe-host.csv", probe_csv("host", ce));
    expect_documented_error("validate " + (d / "probe-host.csv").string() + " -o " + (d / "v").string() +
                                " --bootstrap 0",
                            "copy_engine_Bps");
  }
  // A profile with a range backwards, or a number for a name.
  const std::string base = R"("t0": {"fixed_ns": 100, "per_producer_Bps": 1e10, "aggregate_Bps": 5e10},
      "R_Bps": 2.5e10, "Q_bytes": 1e6, "latency_ns": 500)";
  write(d / "range.json", "{\"name\": \"x\", " + base + ", \"K_range\": {\"min\": 100, \"max\": 1}}");
  expect_documented_error("profiles --show " + (d / "range.json").string(), "K_range");
  write(d / "name.json", "{\"name\": 5, " + base + "}");
  expect_documented_error("profiles --show " + (d / "name.json").string(), "'name' is 5");
  write(d / "ok.json", "{\"name\": \"ok\", " + base + "}");
  EXPECT_EQ(run_cli("profiles --show " + (d / "ok.json").string()).rc, 0);
}

// ---- Found by fuzz_moe_sweep

TEST(FuzzFindings, MoeSweepWithANumberBeyondADoubleIsAnError) {
  const fs::path d = scratch("fuzzmoe");
  write(d / "sweep.json", "{\"device\": 33e3333333333333333, \"configs\": []}");
  expect_documented_error("moe-predict " + (d / "sweep.json").string(), "not JSON");
}

// ---- Messages

TEST(Messages, ParserFailuresAreInTheDocumentedForm) {
  expect_documented_error("predict --K nan --V 1 --G 1", "--K 'nan'");
  expect_documented_error("moe-predict --shape deepseek-v3 --tokens 0 --P 2", "--tokens '0': out of range");
  expect_documented_error("predict --V 1 --G 1", "--K");
  expect_documented_error("predict --K 1 --V 1 --G 1 --no-such-option 3", "--no-such-option");
  // A count the option allows up to 1e15, typed as people write it.
  const CliRun r = run_cli("predict --K 1 --V 4096 --G 1 --bursts 1e15 --json");
  EXPECT_EQ(r.rc, 0) << r.out;
  expect_documented_error("predict --K 1 --V 4096 --G 1 --bursts 1.5", "--bursts");
}

TEST(Messages, NulBytesAndHugeCellsAreShownReadablyAndCut) {
  const fs::path d = scratch("messages");
  write(d / "nul.csv", std::string("K,V_bytes,gap_ns,issue_ns\n8x\0y,4096,0,100\n", 42));
  const CliRun n = run_cli("fit " + (d / "nul.csv").string() + " -o " + (d / "p.json").string());
  EXPECT_EQ(n.rc, 2) << n.out;
  EXPECT_NE(n.out.find("\\x00"), std::string::npos) << n.out;
  write(d / "huge.csv", "K,V_bytes,gap_ns,issue_ns\n" + std::string(500000, '7') + "x,4096,0,100\n");
  const CliRun h = run_cli("fit " + (d / "huge.csv").string() + " -o " + (d / "p.json").string());
  EXPECT_EQ(h.rc, 2) << h.out.substr(0, 1000);
  EXPECT_LT(h.out.size(), 1000u) << h.out.substr(0, 1000);
  EXPECT_NE(h.out.find("bytes cut"), std::string::npos) << h.out;
  // fit on samples no interconnect explains (terabytes in nanoseconds: 1e21
  // B/s) names the file.
  std::string absurd = "K,V_bytes,gap_ns,issue_ns\n";
  for (int K : {8, 32, 132})
    for (double V : {1e12, 1e13, 1e14})
      for (double G : {0.0, 5000.0}) absurd += fmt_row(K, V, G, 1 + V / 1e21 * 1e9 * (1 + 0.01 * (K % 7)));
  write(d / "absurd.csv", absurd);
  expect_documented_error("fit " + (d / "absurd.csv").string() + " -o " + (d / "p.json").string() + " --bootstrap 0",
                          "absurd.csv");
}

TEST(Messages, SimulatorErrorsNameTheUsersOptions) {
  const CliRun r = run_cli("simulate --K 2 --V 1MiB --G 1e14 --bursts 100");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--G 1e14"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("simulate: producer"), std::string::npos) << r.out;
  const CliRun s = run_cli("simulate --K 20 --V 1MiB --G 1us --bursts 1000 --stagger 2e15");
  EXPECT_EQ(s.rc, 2) << s.out;
  EXPECT_NE(s.out.find("--stagger"), std::string::npos) << s.out;
  EXPECT_EQ(s.out.find("staggered_programs"), std::string::npos) << s.out;
}
