// Messages in the documented form (docs/robustness.md): where, what, and a
// specific "; expected ...", never the generic pointer to a command's help.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "scratch_files.hpp"

namespace fs = std::filesystem;

namespace {

// Each `Error(...)` in a source file: its argument text, with its line.
struct Thrown {
  fs::path file;
  size_t line;
  std::string text;
};

std::vector<Thrown> errors_thrown(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string src = ss.str();
  // Comments out, so that prose mentioning an Error is not read as one.
  src = std::regex_replace(src, std::regex(R"(//[^\n]*)"), "");
  std::vector<Thrown> out;
  static const std::regex call(R"(\bError\s*\()");
  for (auto it = std::sregex_iterator(src.begin(), src.end(), call); it != std::sregex_iterator(); ++it) {
    size_t i = size_t(it->position() + it->length());
    int depth = 1;
    const size_t start = i;
    while (i < src.size() && depth > 0) {
      if (src[i] == '"') {
        for (++i; i < src.size() && src[i] != '"'; ++i)
          if (src[i] == '\\') ++i;
      } else if (src[i] == '(') {
        ++depth;
      } else if (src[i] == ')') {
        --depth;
      }
      ++i;
    }
    const auto line = size_t(std::count(src.begin(), src.begin() + it->position(), '\n') + 1);
    out.push_back({file, line, src.substr(start, i - start - 1)});
  }
  return out;
}

// A message that forwards another one (`e.what()`, a variable, "{}: {}")
// carries that one's expectation; any message with words of its own must
// say what was expected.
bool has_own_words(const std::string& arg) {
  if (arg.find(".what()") != std::string::npos) return false;
  std::string literal;
  static const std::regex quoted(R"re("((?:[^"\\]|\\.)*)")re");
  for (std::sregex_iterator it(arg.begin(), arg.end(), quoted), end; it != end; ++it)
    literal += (*it)[1].str();
  literal = std::regex_replace(literal, std::regex(R"(\{[^}]*\})"), "");
  return std::any_of(literal.begin(), literal.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
}

std::string fmt_row(int K, double V, double G, double T) {
  std::ostringstream s;
  s.precision(17);
  s << K << "," << V << "," << G << "," << T << "\n";
  return s.str();
}

}  // namespace

TEST(MessageForm, EveryErrorInCliUtilFitHarnessModelSimAndRuntimeSaysWhatWasExpected) {
  const fs::path root = XSTAGE_SOURCE_DIR;
  std::vector<std::string> bad;
  // The public headers too: an inline throw there reaches the user as well.
  for (const char* dir :
       {"src/cli", "src/util", "src/fit", "src/harness", "src/model", "src/sim", "src/runtime", "include/xstage"})
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (ext != ".cpp" && ext != ".hpp" && ext != ".cu" && ext != ".cuh") continue;
      for (const Thrown& t : errors_thrown(e.path()))
        if (has_own_words(t.text) && t.text.find("expected") == std::string::npos)
          bad.push_back(fs::relative(t.file, root).string() + ":" + std::to_string(t.line) + ": " + t.text);
    }
  std::string list;
  for (const auto& b : bad) list += "\n  " + b;
  EXPECT_TRUE(bad.empty()) << "messages without '; expected ...' (docs/robustness.md):" << list;
}

TEST(MessageForm, OlderCliMessagesSayWhatWasExpected) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"simulate --K 4", "--V and --G are required without --schedule; expected both, or --schedule FILE"},
      {"simulate --K 4000 --V 1MiB --G 1us --bursts 100000",
       "--K x --bursts: 4000 x 100000 bursts; expected at most 1e+08 simulated bursts"},
      {"moe-predict", "moe-predict: nothing to predict; expected one of SWEEP.json, --shape/--tokens/--P"},
      {"moe-predict --shape deepseek-v3",
       "moe-predict: one configuration needs --shape, --tokens and --P; expected all three"},
  };
  for (const auto& [args, fragment] : cases) {
    const CliRun r = run_cli(args);
    EXPECT_EQ(r.rc, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("xstage: error: " + fragment), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(r.out.find("--help` describes"), std::string::npos) << args << "\n" << r.out;
  }
}

TEST(MessageForm, FitNamesTheRowNoInterconnectExplains) {
  const fs::path d = scratch_dir("xstage-msg-", "fit");
  // Terabytes in nanoseconds: every row near 1e20 B/s, the first (line 3)
  // the fastest; no profile holds more than 1e18 B/s.
  std::string csv = "# transport: host\nK,V_bytes,gap_ns,issue_ns\n";
  int n = 0;
  for (int K : {8, 32, 132})
    for (double V : {1e12, 1e13})
      for (double G : {0.0, 5000.0})
        csv += fmt_row(K, V, G, V * 1e-11 * (1 + 0.01 * n++));
  write_text(d / "x.csv", csv);
  const CliRun r = run_cli("fit " + (d / "x.csv").string() + " -o " + (d / "p.json").string() + " --bootstrap 0");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("x.csv:3: column 4 'issue_ns': 10 ns to store V_bytes = 1e+12 with K = 8, gap_ns = 0 is "
                       "1e+20 B/s; these samples fit no interconnect ("),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("; expected at least 1e+03 ns there (1e18 B/s, the fastest rate a profile holds)"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(d / "p.json"));
}
