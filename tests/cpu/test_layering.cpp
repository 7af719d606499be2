// Dependencies point one way: cli -> harness -> library. The library's
// folders are compiled with src/ on their include path, so nothing but this
// test stops a library file from including a harness or command header; the
// Python package (libxstage_torch.so) would then need the harness.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

// The library's folders, relative to the source tree.
const char* const kLibraryFolders[] = {"include/xstage", "src/runtime", "src/device", "src/model", "src/sim",
                                       "src/fit",        "src/layout",  "src/util",   "src/capi"};

bool is_source(const fs::path& p) {
  const std::string e = p.extension().string();
  return e == ".cpp" || e == ".hpp" || e == ".cu" || e == ".cuh" || e == ".in";
}

// The `#include "harness/..."` or `#include "cli/..."` lines of one file, as "path:line: text".
std::vector<std::string> upward_includes(const fs::path& file, const fs::path& root) {
  std::vector<std::string> found;
  std::ifstream in(file);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const auto at = line.find_first_not_of(" \t");
    if (at == std::string::npos || line.compare(at, 8, "#include") != 0) continue;
    if (line.find("\"harness/") != std::string::npos || line.find("\"cli/") != std::string::npos)
      found.push_back(fs::relative(file, root).string() + ":" + std::to_string(n) + ": " + line);
  }
  return found;
}

}  // namespace

TEST(Layering, LibraryIncludesNoHarnessOrCommandHeader) {
  const fs::path root = XSTAGE_SOURCE_DIR;
  int files = 0;
  std::vector<std::string> bad;
  for (const char* folder : kLibraryFolders) {
    ASSERT_TRUE(fs::is_directory(root / folder)) << folder;
    for (const auto& entry : fs::recursive_directory_iterator(root / folder)) {
      if (!entry.is_regular_file() || !is_source(entry.path())) continue;
      ++files;
      for (auto& b : upward_includes(entry.path(), root)) bad.push_back(b);
    }
  }
  EXPECT_GT(files, 100);  // the walk found the tree, not an empty folder
  std::string list;
  for (const auto& b : bad) list += "\n  " + b;
  EXPECT_TRUE(bad.empty()) << "library files include harness or command headers:" << list;
}

// The libraries that Python loads (libxstage_torch.so: the library;
// libxstage_moe.so: the library and the harness) take no std::regex: on the
// GPU machine, compiling one inside a PyTorch process crashed (SIGSEGV in
// the regex compiler's bracket matcher, under device_info: the first
// expert-parallel xstage.MoE call; results/h200/moe-torch/ep-shared-gpu/).
// The command line, its own process, may. (The libraries also export their
// C ABI alone, so that none of their C++ symbols meets torch's: the test
// capi_exports, scripts/check_exports.sh.)
TEST(Layering, NoStdRegexInWhatPythonLoads) {
  const fs::path root = XSTAGE_SOURCE_DIR;
  std::vector<std::string> bad;
  int files = 0;
  for (const char* folder : {"include/xstage", "src/runtime", "src/device", "src/model", "src/sim", "src/fit",
                             "src/layout", "src/util", "src/capi", "src/harness"}) {
    ASSERT_TRUE(fs::is_directory(root / folder)) << folder;
    for (const auto& entry : fs::recursive_directory_iterator(root / folder)) {
      if (!entry.is_regular_file() || !is_source(entry.path())) continue;
      ++files;
      std::ifstream in(entry.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n)
        if (line.find("<regex>") != std::string::npos || line.find("std::regex") != std::string::npos)
          bad.push_back(fs::relative(entry.path(), root).string() + ":" + std::to_string(n) + ": " + line);
    }
  }
  EXPECT_GT(files, 100);
  std::string list;
  for (const auto& b : bad) list += "\n  " + b;
  EXPECT_TRUE(bad.empty()) << "std::regex in a library Python loads:" << list;
}
