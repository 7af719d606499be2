// Option names that a newer CLI11 would refuse (src/cli/option_names.hpp):
// the rule on made-up command trees (CLI11 2.4 itself refuses to build the
// clashing ones, so they are written as data), what the check reads from a
// CLI11 tree, and the whole xstage command, which runs the check on every
// start.
#include <gtest/gtest.h>

#include "cli/option_checks.hpp"
#include "cli/option_names.hpp"
#include "cli_runner.hpp"

using xstage::cli::command_options;
using xstage::cli::CommandOptions;
using xstage::cli::option_name_clashes;
using xstage::cli::OptionNames;

namespace {
const OptionNames help{{"h"}, {"help"}, false};
}

TEST(CliOptionNames, OneLetterLongNameBesideTheSameShortNameClashes) {
  // moe-gemm's --h beside its -h,--help: CLI11 2.4 aborted every command on it.
  const auto c = option_name_clashes({{"moe-gemm", {help, {{}, {"h"}, false}}}});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0], "moe-gemm: -h,--help clashes with --h (the name 'h')");
}

TEST(CliOptionNames, ShortNameBesideAOneLetterLongNameClashesInEitherOrder) {
  EXPECT_EQ(option_name_clashes({{"fit", {{{}, {"o"}, false}, {{"o"}, {"output"}, false}}}}).size(), 1u);
  EXPECT_EQ(option_name_clashes({{"fit", {{{"o"}, {"output"}, false}, {{}, {"o"}, false}}}}).size(), 1u);
  EXPECT_EQ(option_name_clashes({{"fit", {{{"o"}, {}, false}, {{"o"}, {}, false}}}}).size(), 1u);  // plain duplicates
}

TEST(CliOptionNames, CaseMattersOnlyWhereAnOptionIgnoresIt) {
  EXPECT_TRUE(option_name_clashes({{"", {{{}, {"K"}, false}, {{}, {"k"}, false}}}}).empty());
  EXPECT_EQ(option_name_clashes({{"", {{{}, {"K"}, false}, {{}, {"k"}, true}}}}).size(), 1u);
}

TEST(CliOptionNames, LongNamesOfSeveralLettersAndOtherCommandsDoNotClash) {
  EXPECT_TRUE(option_name_clashes({{"a", {help, {{}, {"hh"}, false}, {{}, {"x"}, false}}},
                                   {"b", {help, {{}, {"x"}, false}}}})
                  .empty());
}

TEST(CliOptionNames, ReadsEveryCommandsOptionsWithTheirHelpFlags) {
  CLI::App app{"t"};
  std::string x;
  auto* sub = app.add_subcommand("moe-gemm", "");
  sub->add_option("--act,-a", x, "");
  const auto cmds = command_options(app);
  ASSERT_EQ(cmds.size(), 2u);
  EXPECT_EQ(cmds[1].path, "moe-gemm");
  bool has_help = false, has_act = false;
  for (const OptionNames& o : cmds[1].options) {
    has_help |= o.shorts == std::vector<std::string>{"h"};
    has_act |= o.longs == std::vector<std::string>{"act"} && o.shorts == std::vector<std::string>{"a"};
  }
  EXPECT_TRUE(has_help);
  EXPECT_TRUE(has_act);
  EXPECT_TRUE(option_name_clashes(cmds).empty());
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

// The parser's range message in the documented form, as CLI11 2.1 and 2.4
// word it (the GPU machine's 2.4 wrote "[1 - 16777216]", which an earlier
// pattern missed).
TEST(CliParserMessages, RangeFailuresOfEitherCli11VersionReadTheSame) {
  CLI::App app{"t"};
  for (const char* text : {"Value 0 not in range 1 to 16777216", "Value 0 not in range [1 - 16777216]"}) {
    const std::string got = xstage::cli::documented_parse_error(app, CLI::ValidationError("--tokens", text));
    EXPECT_NE(got.find("--tokens '0': out of range; expected a value from 1 to 16777216"), std::string::npos)
        << text << " -> " << got;
  }
  const std::string frac = xstage::cli::documented_parse_error(
      app, CLI::ValidationError("--tie", "Value -1 not in range [0.000000 - 1.000000]"));
  EXPECT_NE(frac.find("expected a value from 0 to 1"), std::string::npos) << frac;
}
