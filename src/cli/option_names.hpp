#pragma once
// Clashes between option names in one command, by the strictest rule any
// CLI11 version applies. CLI11 2.4 refuses at start-up a single-letter long
// name beside the same short name (`--h` beside `-h`) where 2.1 accepted it;
// a clash found only on the machine with the newer library aborts every
// command there. main() runs this check on every start, and a CPU test runs
// it on the whole command tree, so a clash fails here whatever CLI11 is
// installed.
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace xstage::cli {

// One sentence per clash, naming the command and both options
// ("moe-gemm: --h clashes with -h,--help (the name 'h')"); empty when none.
// Looks at `app` and every subcommand under it. Names clash when equal
// (case-insensitively where either option ignores case), and a short name
// clashes with a one-letter long name of the same letter in either order.
std::vector<std::string> option_name_clashes(const CLI::App& app);

// Throws std::logic_error listing the clashes (a programming error: the
// command then exits 3, "internal error").
void check_option_names(const CLI::App& app);

}  // namespace xstage::cli
