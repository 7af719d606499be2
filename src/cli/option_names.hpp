#pragma once
// Clashes between option names in one command, by the strictest rule any
// CLI11 version applies. CLI11 2.4 refuses at start-up a single-letter long
// name beside the same short name (`--h` beside `-h`) where 2.1 accepted it;
// a clash found only on the machine with the newer library aborts every
// command there. main() runs this check on every start, and CPU tests run it
// on the whole command tree and on made-up trees, so a clash fails here
// whatever CLI11 is installed.
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace xstage::cli {

// One option's names, without dashes.
struct OptionNames {
  std::vector<std::string> shorts, longs;
  bool ignore_case = false;
};

// One command's options ("moe-gemm", or "" for the top level), the help flag included.
struct CommandOptions {
  std::string path;
  std::vector<OptionNames> options;
};

// `app` and every subcommand under it, as the check sees them.
std::vector<CommandOptions> command_options(const CLI::App& app);

// One sentence per clash, naming the command and both options
// ("moe-gemm: -h,--help clashes with --h (the name 'h')"); empty when none.
// Names clash when equal (case-insensitively where either option ignores
// case), and a short name clashes with a one-letter long name of the same
// letter in either order.
std::vector<std::string> option_name_clashes(const std::vector<CommandOptions>& commands);

// Throws std::logic_error listing the clashes of `app`'s tree (a
// programming error: the command then exits 3, "internal error").
void check_option_names(const CLI::App& app);

}  // namespace xstage::cli
