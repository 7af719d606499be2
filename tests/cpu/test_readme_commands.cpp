// Every command README's first command block shows runs, on the files it
// names, on a machine without a GPU.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_runner.hpp"

namespace fs = std::filesystem;

TEST(ReadmeCommands, EveryCpuCommandRunsOnTheFilesItNames) {
  const fs::path src(XSTAGE_SOURCE_DIR);
  std::ifstream in(src / "README.md");
  ASSERT_TRUE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string readme = ss.str();
  const size_t start = readme.find("```sh\nbuild/xstage --help-all");
  ASSERT_NE(start, std::string::npos) << "README's command block moved";
  const size_t end = readme.find("```", start + 5);
  std::istringstream block(readme.substr(start + 6, end - start - 6));
  // Outputs (profile.json, occ.csv, out/) go to a scratch folder that sees
  // the repository's results/ and docs/ under the same names.
  // A folder of this run's own: two test runs at once (CI and a developer,
  // or two checkouts) must not remove each other's.
  std::string tmpl = (fs::temp_directory_path() / "xstage-readme-commands-XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << "mkdtemp " << tmpl;
  const fs::path work = tmpl;
  for (const char* d : {"results", "docs", "profiles"}) fs::create_directory_symlink(src / d, work / d);
  std::string line;
  int ran = 0;
  while (std::getline(block, line)) {
    if (line.rfind("build/xstage", 0) != 0) continue;
    std::string args = line.substr(std::string("build/xstage").size());
    if (const size_t hash = args.find("  #"); hash != std::string::npos) args.resize(hash);
    const CliRun r = run_cli("--version >/dev/null && cd " + work.string() + " && " + xstage_cli_path() + args);
    EXPECT_EQ(r.rc, 0) << line << "\n" << r.out;
    ++ran;
  }
  EXPECT_GE(ran, 9);
  fs::remove_all(work);
}
