// Hostile and oversized input, as a new user would type it: every case ends
// in one clear error line and a non-zero exit, or in a correct result within
// a bounded memory; none leaves a damaged or stray file behind.
#include <gtest/gtest.h>
#include <grp.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "scratch_files.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path scratch(const std::string& name) { return scratch_dir("xstage-hostile-", name); }
void write(const fs::path& p, const std::string& text) { write_text(p, text); }
std::string read(const fs::path& p) { return read_text(p); }

// Synthetic samples: K, V and G on a grid, the issue time of a stage draining
// at 25 GB/s behind an issue rate of min(K x 7 GB/s, 50 GB/s), each point
// `copies` times, with a small deterministic spread from point to point.
std::string samples_csv(int copies, bool drain_limited = true) {
  std::string s = "K,V_bytes,gap_ns,issue_ns\n";
  for (int c = 0; c < copies; ++c) {
    int n = 0;
    for (int K : {8, 32, 132})
      for (double V : {262144.0, 1048576.0, 4194304.0})
        for (double G : {0.0, 5000.0, 20000.0, 100000.0}) {
          double t = 2000 + V / std::min(K * 7e9, 50e9) * 1e9;
          if (drain_limited) t = std::max(t, V / 25e9 * 1e9 - G);
          t *= 1 + 0.02 * ((n++ * 7919) % 11 - 5) / 5.0;
          s += std::to_string(K) + "," + std::to_string(V) + "," + std::to_string(G) + "," + std::to_string(t) + "\n";
        }
  }
  return s;
}

void expect_clear_error(const std::string& args, const std::string& fragment) {
  const CliRun r = run_cli(args);
  EXPECT_EQ(r.rc, 2) << args << "\n" << r.out;
  EXPECT_NE(r.out.find(fragment), std::string::npos) << args << "\n" << r.out;
  EXPECT_EQ(r.out.find("internal error"), std::string::npos) << args << "\n" << r.out;
}

bool has_stray_files(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.find(".tmp") != std::string::npos || n.find(".xstage-") != std::string::npos) return true;
  }
  return false;
}

// What a child writes to the pipe `fd` (stdout and stderr) until it exits,
// its exit status and its peak resident set (KiB; wait4 on that one child:
// getrusage RUSAGE_CHILDREN would keep the largest child this binary ran).
CliRun collect_child(pid_t pid, int fd, long* peak_kib) {
  CliRun r;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) r.out.append(buf, size_t(n));
  ::close(fd);
  int status = 0;
  rusage u{};
  if (pid > 0 && ::wait4(pid, &status, 0, &u) == pid) {
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (peak_kib) *peak_kib = u.ru_maxrss;
  }
  return r;
}

// The command's peak resident set beside what it prints. Linux folds the
// peak of the memory a child had before its exec (this test binary's, for a
// forked or spawned child) into the peak wait4 reports, so the figure is
// max(this binary's peak, the command's): a bound on the command only while
// this binary stays below it (peak_bound_holds).
CliRun run_cli_peak_rss(const std::string& args, long& peak_kib) {
  peak_kib = -1;
  int fds[2];
  if (::pipe(fds) != 0) return {};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_addclose(&fa, fds[1]);
  std::string cmd = "exec " + xstage_cli_path() + " " + args;
  char sh[] = "sh", dash_c[] = "-c";
  char* argv[] = {sh, dash_c, cmd.data(), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, "/bin/sh", &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  return collect_child(rc == 0 ? pid : -1, fds[0], &peak_kib);
}

// Whether a peak from run_cli_peak_rss below `limit_kib` says anything about
// the command: this binary's own peak must be below it too. ctest runs each
// test in a fresh process; the whole binary in one process may pass it.
bool peak_bound_holds(long limit_kib) {
  rusage self{};
  ::getrusage(RUSAGE_SELF, &self);
  return self.ru_maxrss < limit_kib;
}

// Root writes past permission bits: as root, the command runs as the
// unprivileged user 65534 (nobody), for whom a read-only file or folder is
// read-only. rc 125..127: it could not be started as that user.
CliRun run_cli_unprivileged(const std::string& args) {
  if (::geteuid() != 0) return run_cli(args);
  int fds[2];
  if (::pipe(fds) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(125);
    const std::string cmd = xstage_cli_path() + " " + args;
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  return collect_child(pid, fds[0], nullptr);
}

}  // namespace

TEST(OutputFiles, ReadOnlyFileAndFolderAreRefusedBeforeWork) {
  const fs::path d = scratch("readonly");
  fs::permissions(d, fs::perms::all);  // anyone may make files here: only the read-only ones below are in the way
  write(d / "s.csv", samples_csv(1));
  write(d / "ro.json", "old");
  fs::permissions(d / "ro.json", fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  fs::create_directory(d / "ro");
  fs::permissions(d / "ro", fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                                fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  const struct {
    std::string args, fragment;
  } cases[] = {
      {"fit " + (d / "s.csv").string() + " -o " + (d / "ro.json").string(), "not writable"},
      {"fit " + (d / "s.csv").string() + " -o " + (d / "ro/p.json").string(), "cannot create files in"},
      // Checked before the samples are read: the missing input is not reached.
      {"fit /nonexistent.csv -o " + (d / "ro.json").string(), "-o " + (d / "ro.json").string()},
      {"simulate --K 4 --V 1MiB --G 1us --timeline " + (d / "ro/t.csv").string(), "cannot create files in"},
      {"validate " + (d / "s.csv").string() + " -o " + (d / "ro").string(), "cannot create files in"},
  };
  for (const auto& c : cases) {
    const CliRun r = run_cli_unprivileged(c.args);
    if (r.rc >= 125 && r.rc <= 127)
      GTEST_SKIP() << "running as root, and the command cannot be started as the unprivileged user 65534 (is the "
                      "build readable by others?): "
                   << r.out;
    EXPECT_EQ(r.rc, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.fragment), std::string::npos) << c.args << "\n" << r.out;
  }
  EXPECT_EQ(read(d / "ro.json"), "old");
  EXPECT_FALSE(has_stray_files(d));
  EXPECT_FALSE(has_stray_files(d / "ro"));
}

TEST(OutputFiles, UnwritableForRootTooIsRefusedBeforeWork) {
  // What no permission bit decides, so that it fails for root as for anyone:
  // /proc refuses new files, a "folder" that is a file holds none, a
  // descriptor that is not open cannot be written.
  const fs::path d = scratch("unwritable");
  write(d / "s.csv", samples_csv(1));
  write(d / "file", "x");
  expect_clear_error("fit /nonexistent.csv -o /proc/version", "-o /proc/version");
  expect_clear_error("fit /nonexistent.csv -o /proc/xstage.json", "cannot create files in /proc");
  expect_clear_error("fit /nonexistent.csv -o " + (d / "file/p.json").string(), "is not a folder");
  expect_clear_error("fit /nonexistent.csv -o /proc/self/fd/987", "descriptor 987 is not open in this process");
  expect_clear_error("simulate --K 4 --V 1MiB --G 1us --bursts-out /proc/self/status", "/proc/self/status");
  expect_clear_error("validate " + (d / "s.csv").string() + " -o " + (d / "file").string(), "cannot make this folder");
  EXPECT_EQ(read(d / "file"), "x");
  EXPECT_FALSE(has_stray_files(d));
}

TEST(OutputFiles, DevShmFileIsReplacedNotAppended) {
  // Only the names of open descriptors (/dev/stdout, /proc/self/fd/N) are
  // written through; a file under /dev (tmpfs) is a file like any other.
  if (!fs::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm here";
  const fs::path out = fs::path("/dev/shm") / ("xstage-test-" + std::to_string(::getpid()) + ".csv");
  for (int i = 0; i < 2; ++i) {
    const CliRun r = run_cli("simulate --K 2 --V 1MiB --G 1us --bursts 3 --bursts-out " + out.string());
    ASSERT_EQ(r.rc, 0) << r.out;
  }
  const std::string text = read(out);
  fs::remove(out);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1 + 2 * 3) << text;
}

TEST(OutputFiles, SymlinkKeptTargetReplaced) {
  const fs::path d = scratch("symlink");
  write(d / "s.csv", samples_csv(1));
  write(d / "target.json", "old");
  fs::create_symlink(d / "target.json", d / "link.json");
  const CliRun r = run_cli("fit " + (d / "s.csv").string() + " -o " + (d / "link.json").string() + " --bootstrap 0");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(fs::is_symlink(d / "link.json"));
  EXPECT_NO_THROW(json::parse(read(d / "target.json")));
  EXPECT_FALSE(has_stray_files(d));
}

TEST(OutputFiles, DevStdoutIsStreamedNotReplaced) {
  const fs::path d = scratch("stdout");
  write(d / "s.csv", samples_csv(1));
  const CliRun r = run_cli("fit " + (d / "s.csv").string() + " -o /dev/stdout --bootstrap 0 --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("\"R_Bps\""), std::string::npos) << r.out;
  EXPECT_TRUE(fs::is_symlink("/dev/stdout") || fs::is_character_file("/dev/stdout"));
}

TEST(OutputFiles, FolderEmptyNameInputAndMissingFolderAreRefusedBeforeWork) {
  const fs::path d = scratch("refused");
  const std::string in = (d / "s.csv").string();
  write(in, samples_csv(1));
  const std::string before = read(in);
  expect_clear_error("fit " + in + " -o " + d.string(), "is a folder");
  expect_clear_error("fit " + in + " -o ''", "'': empty value; expected a value");
  expect_clear_error("fit " + in + " -o " + in, "refusing to overwrite an input");
  expect_clear_error("fit " + in + " -o " + (d / "no/such/dir/p.json").string(), "does not exist");
  // Checked before the samples are even read: a missing input is not reached.
  expect_clear_error("fit /nonexistent.csv -o " + (d / "no/p.json").string(), "does not exist");
  EXPECT_EQ(read(in), before);
  EXPECT_FALSE(has_stray_files(d));
  expect_clear_error("simulate --K 4 --V 1MiB --G 1us --timeline " + d.string(), "is a folder");
  expect_clear_error("validate " + in + " -o ''", "'': empty value; expected a value");
}

TEST(RunawaySizes, EndInAClearError) {
  expect_clear_error("simulate --K 16 --V 1MiB --G 5us --bursts 1000000000000", "at most");
  expect_clear_error("simulate --K 20000000 --V 1MiB --G 5us", "--K");
  expect_clear_error("simulate --K 2147483647 --V 1MiB --G 5us", "--K");
  expect_clear_error("report --cpu --K 10000000", "--K");
  expect_clear_error("simulate --K 4 --V 1e300 --G 1us", "--V");
  // predict keeps the same bounds (its arithmetic would print 2e298 ns); a
  // count CLI11 saturates (1e20 bursts read as 2^63 - 1) is out of range too.
  expect_clear_error("predict --K 8 --V 1e300 --G 1us", "--V");
  expect_clear_error("predict --K 8 --V 1MiB --G 1e300", "--G");
  expect_clear_error("predict --K 2147483647 --V 1MiB --G 1us", "--K");
  expect_clear_error("predict --K 8 --V 1MiB --G 1us --bursts 100000000000000000000", "--bursts");
}

TEST(RunawaySizes, SimulatorMemoryDoesNotGrowWithBursts) {
  // 64 producers x 60000 bursts: 3.8 million bursts, kept in memory they
  // would take about 250 MB; streamed, the command stays under 64 MB.
  if (!peak_bound_holds(64 * 1024)) GTEST_SKIP() << "this test binary is above 64 MB itself; run the test alone";
  long peak_kib = -1;
  const CliRun r = run_cli_peak_rss("simulate --K 64 --V 1MiB --G 5us --bursts 60000 --json", peak_kib);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(json::parse(r.out.substr(r.out.find('{')))["bursts"].get<long>(), 64L * 60000);
  EXPECT_GT(peak_kib, 0);
  EXPECT_LT(peak_kib, 64 * 1024) << "peak RSS of the command (or of this binary), KiB";
}

TEST(RunawaySizes, FitMemoryAndTimeDoNotGrowWithRepeatedRows) {
  // 400,000 rows (36 points, each with 11 distinct times): kept row by row
  // they took about 200 bytes each (80 MB); read into counted points the
  // command stays under 32 MB, and the fit costs what the 36 points cost.
  const fs::path d = scratch("bigfit");
  {
    std::ofstream f(d / "big.csv");
    const std::string once = samples_csv(1);
    f << once;
    const std::string rows = once.substr(once.find('\n') + 1);
    for (int c = 1; c < 400000 / 36; ++c) f << rows;
  }
  if (!peak_bound_holds(32 * 1024)) GTEST_SKIP() << "this test binary is above 32 MB itself; run the test alone";
  long peak_kib = -1;
  const CliRun r = run_cli_peak_rss(
      "fit " + (d / "big.csv").string() + " -o " + (d / "p.json").string() + " --bootstrap 0 --json", peak_kib);
  ASSERT_EQ(r.rc, 0) << r.out.substr(0, 2000);
  const json j = json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["samples"].get<long>(), 36L * (400000 / 36));
  EXPECT_EQ(j["points"].size(), 36u);
  EXPECT_GT(peak_kib, 0);
  EXPECT_LT(peak_kib, 32 * 1024) << "peak RSS of the command (or of this binary), KiB";
}

TEST(SilentNonsense, SamplesCsvWithAByteOrderMarkAndANulByte) {
  const fs::path d = scratch("samplesbom");
  write(d / "bom.csv", "\xEF\xBB\xBF" + samples_csv(1));
  const CliRun r = run_cli("fit " + (d / "bom.csv").string() + " -o " + (d / "p.json").string() + " --bootstrap 0");
  EXPECT_EQ(r.rc, 0) << r.out;
  write(d / "nul.csv", std::string("K,V_bytes,gap_ns,issue_ns\n8,1048576\0garbage,0,20000\n", 49));
  expect_clear_error("fit " + (d / "nul.csv").string() + " -o " + (d / "p.json").string(),
                     "nul.csv:2: column 2 'V_bytes'");
}

TEST(SilentNonsense, ReportFormulaIsTheOneItsTablesUse) {
  // The printed T0 formula, read back with its rounded numbers, gives the
  // T0 of the regime-boundary table within the rounding (1%): with the near
  // queue's term where the profile has one, without it where it has none.
  const std::regex token(R"(([0-9]+(?:\.[0-9]+)?) (ns|us|ms|B|KiB|MiB|GiB|kB/s|MB/s|GB/s|TB/s)\b)");
  const std::map<std::string, double> unit = {{"ns", 1},      {"us", 1e3},    {"ms", 1e6},     {"B", 1},
                                              {"KiB", 1024},  {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"kB/s", 1e3},
                                              {"MB/s", 1e6},  {"GB/s", 1e9},  {"TB/s", 1e12}};
  for (const std::string profile : {"h200-host-pcie", "h200-nvlink4-nominal"}) {
    const CliRun r = run_cli("report --cpu --K 16 --json --profile " + profile, /*with_stderr=*/false);
    ASSERT_EQ(r.rc, 0) << r.out;
    const json j = json::parse(r.out);
    const std::string formula = j["t0_formula"];
    std::vector<double> v;
    for (std::sregex_iterator it(formula.begin(), formula.end(), token), end; it != end; ++it)
      v.push_back(std::stod((*it)[1]) * unit.at((*it)[2]));
    const bool near = formula.find("V_near") != std::string::npos;
    EXPECT_EQ(near, !j["profile"]["t0"]["near_bytes"].is_null()) << formula;
    ASSERT_EQ(v.size(), near ? 6u : 3u) << formula;
    const double K = 16;
    for (const json& b : j["regime_boundaries"]) {
      const double V = b["V_bytes"];
      double t0 = v[0];
      if (near) {
        const double vn = std::min(V, K * v[5]);
        t0 += (vn / std::min(K * v[1], v[2]) + (V - vn) / std::min(K * v[3], v[4])) * 1e9;
      } else {
        t0 += V / std::min(K * v[1], v[2]) * 1e9;
      }
      EXPECT_NEAR(t0 / b["t0_ns"].get<double>(), 1.0, 0.01) << profile << " V = " << V << ": " << formula;
    }
    // The people's report prints the same formula.
    const CliRun t = run_cli("report --cpu --K 16 --profile " + profile);
    EXPECT_NE(t.out.find(formula), std::string::npos) << t.out;
  }
}

TEST(SilentNonsense, HugeComputeStepIsRejectedNotSwallowingAStore) {
  const fs::path d = scratch("schedule");
  write(d / "h.csv", "producer,kind,amount\n0,compute,1e308\n0,store,1MiB\n");
  expect_clear_error("simulate --schedule " + (d / "h.csv").string(), "longest a schedule may run");
  write(d / "nul.csv", std::string("producer,kind,amount\n0,store,1MiB\0garbage\n", 44));
  expect_clear_error("simulate --schedule " + (d / "nul.csv").string(), "unknown unit");
  write(d / "bom.csv", "\xEF\xBB\xBFproducer,kind,amount\n0,store,1MiB\n0,compute,1us\n");
  const CliRun r = run_cli("simulate --schedule " + (d / "bom.csv").string());
  EXPECT_EQ(r.rc, 0) << r.out;
}

TEST(SilentNonsense, ProfileWithAbsurdRatesIsRejected) {
  const fs::path d = scratch("profile");
  write(d / "p.json",
        R"({"name": "tiny", "t0": {"fixed_ns": 100, "per_producer_Bps": 1e-300, "aggregate_Bps": 1e-300},
            "R_Bps": 1e-300, "Q_bytes": 1e6})");
  expect_clear_error("predict --profile " + (d / "p.json").string() + " --K 8 --V 1MiB --G 1us", "bytes/s");
  expect_clear_error("predict --profile " + d.string() + " --K 8 --V 1MiB --G 1us", "is a folder");
}

TEST(SilentNonsense, FreeRegimeOnlyFitSaysRIsNotIdentified) {
  const fs::path d = scratch("free");
  write(d / "s.csv", samples_csv(1, /*drain_limited=*/false));
  const CliRun t = run_cli("fit " + (d / "s.csv").string() + " -o " + (d / "p.json").string() + " --bootstrap 8");
  ASSERT_EQ(t.rc, 0) << t.out;
  EXPECT_NE(t.out.find("(not identified: no drain-limited sample)"), std::string::npos) << t.out;
  const json p = json::parse(read(d / "p.json"));
  EXPECT_TRUE(p["sigma"]["R_Bps"].is_null()) << p.dump(2);
  const CliRun j = run_cli("fit " + (d / "s.csv").string() + " -o " + (d / "p2.json").string() + " --json");
  ASSERT_EQ(j.rc, 0) << j.out;
  EXPECT_FALSE(json::parse(j.out.substr(j.out.find('{')))["identified"]["R"].get<bool>());
}

TEST(SilentNonsense, RepeatedRowsFitLikeTheDistinctOnes) {
  const fs::path d = scratch("repeat");
  write(d / "once.csv", samples_csv(1));
  write(d / "many.csv", samples_csv(200));  // 7200 rows, 36 distinct points
  auto fitted = [&](const char* name) {
    const CliRun r =
        run_cli("fit " + (d / name).string() + " -o " + (d / "p.json").string() + " --bootstrap 0 --json");
    EXPECT_EQ(r.rc, 0) << r.out;
    return json::parse(r.out.substr(r.out.find('{')));
  };
  // The same points with 200 times the weight: the same predictions (the form
  // BIC picks may differ with n, so parameters are not compared one by one).
  const json once = fitted("once.csv"), many = fitted("many.csv");
  ASSERT_EQ(once["points"].size(), many["points"].size());
  for (size_t i = 0; i < once["points"].size(); ++i) {
    EXPECT_EQ(many["points"][i]["n"].get<int>(), 200);
    EXPECT_NEAR(many["points"][i]["predicted_ns"].get<double>() / once["points"][i]["predicted_ns"].get<double>(), 1.0,
                0.03)
        << i;
  }
}

TEST(SilentNonsense, UlyssesReportFieldsAreCheckedNotWrappedOrDefaulted) {
  const fs::path d = scratch("ureport");
  auto report = [](const std::string& row_extra, const std::string& summary) {
    return R"({"block_m": 128, "concurrent_tiles": 132, "profile": "h200-host-pcie", "rows": [{"P": 8, "B": 1,
      "H": 24, "D": 128, )" + row_extra + R"(}], "summary": [)" + summary + "]}";
  };
  const std::string ok_summary = R"({"S": 4096, "attention_only_us": 300, "fused_us": 500})";
  const struct {
    std::string name, text, fragment;
  } cases[] = {
      {"pigeon", report(R"("backend": "carrier-pigeon")", ok_summary), "\"backend\" is \"carrier-pigeon\"; expected emulated, peer or nccl"},
      {"bigP", R"({"block_m": 128, "concurrent_tiles": 132, "profile": "h200-host-pcie", "rows": [{"P": 2147483648,
        "B": 1, "H": 24, "D": 128, "backend": "emulated"}], "summary": [)" + ok_summary + "]}",
       "\"P\" is 2147483648; expected a whole number"},
      {"fractionS", report(R"("backend": "emulated")", R"({"S": 4096.7, "attention_only_us": 300})"),
       "\"S\" is 4096.7; expected a whole number"},
      {"hugeB", R"({"block_m": 128, "concurrent_tiles": 132, "profile": "h200-host-pcie", "rows": [{"P": 8,
        "B": 1000000000, "H": 24, "D": 128, "backend": "emulated"}], "summary": [)" + ok_summary + "]}",
       "\"B\" is 1000000000; expected a whole number"},
      {"hugeS", report(R"("backend": "emulated")", R"({"S": 1099511627776, "attention_only_us": 300})"),
       "\"S\" is 1099511627776; expected a whole number"},
      {"nullfused", report(R"("backend": "emulated")", R"({"S": 4096, "attention_only_us": 300, "fused_us": "x"})"),
       "fused_us"},
      {"nullblock", R"({"block_m": null, "concurrent_tiles": 132, "profile": "h200-host-pcie", "rows": [{"P": 8,
        "B": 1, "H": 24, "D": 128, "backend": "emulated"}], "summary": [)" + ok_summary + "]}",
       "\"block_m\" is null; expected a whole number"},
  };
  for (const auto& c : cases) {
    write(d / (c.name + ".json"), c.text);
    expect_clear_error("ulysses-predict " + (d / (c.name + ".json")).string(), c.fragment);
  }
  expect_clear_error("ulysses-predict " + d.string(), "is a folder");
  write(d / "nullok.json", report(R"("backend": "emulated")", R"({"S": 4096, "attention_only_us": 300, "fused_us": null})"));
  const CliRun r = run_cli("ulysses-predict " + (d / "nullok.json").string() + " --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(json::parse(r.out.substr(r.out.find('{')))["rows"][0]["fused_us"].is_null());
}

TEST(SilentNonsense, AttnScaleNanIsAnError) {
  expect_clear_error("attn --scale nan", "--scale");
  expect_clear_error("attn --scale -1", "--scale");
}

TEST(CliConvention, VersionHelpAndUnknownCommand) {
  const CliRun v = run_cli("--version");
  EXPECT_EQ(v.rc, 0);
  EXPECT_EQ(v.out.rfind("xstage ", 0), 0u) << v.out;
  const CliRun h = run_cli("help");
  EXPECT_EQ(h.rc, 0);
  EXPECT_NE(h.out.find("simulate"), std::string::npos) << h.out;
  expect_clear_error("frobnicate", "unknown command 'frobnicate'; the commands are");
}

TEST(CliConvention, EveryResultCommandHasJsonAndCsv) {
  const fs::path d = scratch("convention");
  for (const std::string args : {"report --cpu", "predict --K 16 --V 1MiB --G 1us",
                                 "simulate --K 16 --V 1MiB --G 1us --bursts 20", "profiles",
                                 "profiles --show h200-local",
                                 "ulysses-predict " XSTAGE_SOURCE_DIR "/results/h200/ulysses/ulysses.json"}) {
    const CliRun j = run_cli(args + " --json");
    ASSERT_EQ(j.rc, 0) << args << "\n" << j.out;
    EXPECT_NO_THROW(json::parse(j.out.substr(j.out.find_first_of("[{")))) << args << "\n" << j.out;
    const CliRun c = run_cli(args + " --csv");
    ASSERT_EQ(c.rc, 0) << args << "\n" << c.out;
    EXPECT_EQ(c.out.find('{'), std::string::npos) << args << " --csv printed JSON\n" << c.out;
    EXPECT_EQ(c.out.find(" us"), std::string::npos) << args << " --csv printed units\n" << c.out;
  }
  // validate: the same keys every run, null where no onset was measured.
  const std::string probe = XSTAGE_SOURCE_DIR "/results/h200x2/probe/probe-peer.csv";
  const CliRun j = run_cli("validate " + probe + " -o " + d.string() + " --bootstrap 2 --json");
  ASSERT_EQ(j.rc, 0) << j.out;
  const json v = json::parse(j.out.substr(j.out.find('{')));
  for (const char* k : {"R_Bps", "Q_bytes", "onset_gap_err", "onset_series", "models"})
    EXPECT_TRUE(v["transports"][0].contains(k)) << k;
  const CliRun c = run_cli("validate " + probe + " -o " + d.string() + " --bootstrap 2 --csv");
  ASSERT_EQ(c.rc, 0) << c.out;
  EXPECT_EQ(c.out.rfind("transport,model,median_rel_err", 0), 0u) << c.out;
}

TEST(SilentNonsense, ValidateWithoutOnsetSeriesSaysSoAndWritesNull) {
  const fs::path d = scratch("noonset");
  // Free-regime rows only: no held-out series shows a backpressure onset.
  std::string csv =
      "# transport: host\n# device: test\n# driver: none\n# date: 2026-01-01\n# commit: none\n# command: none\n"
      "# copy_engine_Bps: 5e10\n# sm_clock_mhz_measured: 1980\n";
  const std::string body = samples_csv(1, /*drain_limited=*/false);
  std::istringstream lines(body);
  std::string line;
  std::getline(lines, line);
  csv += line + ",set\n";
  for (int i = 0; std::getline(lines, line); ++i) csv += line + (i % 3 == 0 ? ",holdout\n" : ",train\n");
  write(d / "probe-host.csv", csv);
  const CliRun t = run_cli("validate " + (d / "probe-host.csv").string() + " -o " + (d / "out").string() +
                           " --bootstrap 2");
  ASSERT_EQ(t.rc, 0) << t.out;
  EXPECT_NE(t.out.find("nothing to compare"), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("-100.0%"), std::string::npos) << t.out;
  const json v = json::parse(read(d / "out" / "validation-host.json"));
  EXPECT_TRUE(v["onset_gap_err"].is_null()) << v.dump(2);
  EXPECT_EQ(v["onset_series"].get<int>(), 0);
}
