// Option names that a newer CLI11 would refuse (src/cli/option_names.hpp):
// the checker on small command trees, then the whole xstage command, which
// runs the checker on every start.
#include <gtest/gtest.h>

#include "cli/option_names.hpp"
#include "cli_runner.hpp"

using xstage::cli::option_name_clashes;

TEST(CliOptionNames, OneLetterLongNameBesideTheSameShortNameClashes) {
  CLI::App app{"t"};
  auto* sub = app.add_subcommand("moe-gemm", "");
  std::string h;
  sub->add_option("--h", h, "");  // beside the subcommand's own -h,--help: CLI11 2.4 aborts here
  const auto c = option_name_clashes(app);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NE(c[0].find("moe-gemm: -h,--help clashes with --h"), std::string::npos) << c[0];
}

TEST(CliOptionNames, ShortNameBesideAOneLetterLongNameClashesInEitherOrder) {
  CLI::App app{"t"};
  std::string a, b;
  app.add_option("--o", a, "");
  app.add_option("-o,--output", b, "");
  EXPECT_EQ(option_name_clashes(app).size(), 1u);
}

// (Where an option ignores case, CLI11 itself refuses the clash when it is added.)
TEST(CliOptionNames, NamesDifferingInCaseDoNotClash) {
  CLI::App app{"t"};
  int k = 0, K = 0;
  app.add_option("--K", K, "");
  app.add_option("--k", k, "");
  EXPECT_TRUE(option_name_clashes(app).empty());
}

TEST(CliOptionNames, LongNamesOfSeveralLettersAndOtherCommandsDoNotClash) {
  CLI::App app{"t"};
  std::string x;
  app.add_option("--hh", x, "");
  auto* a = app.add_subcommand("a", "");
  auto* b = app.add_subcommand("b", "");
  a->add_option("--x", x, "");
  b->add_option("--x", x, "");  // the same name in two commands is fine
  EXPECT_TRUE(option_name_clashes(app).empty());
}

// The command checks its whole tree on every start (main.cpp): a clash would
// make every command exit 3 with "option names clash".
TEST(CliOptionNames, TheXstageCommandHasNone) {
  const CliRun r = run_cli("--help-all");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("clash"), std::string::npos) << r.out;
  const CliRun g = run_cli("moe-gemm --help");
  EXPECT_EQ(g.rc, 0) << g.out;
  EXPECT_NE(g.out.find("--act"), std::string::npos) << g.out;
}
