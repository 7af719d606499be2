#pragma once
// What every command's options must hold before the command runs, and the
// option parser's failures in the documented form
// (`xstage: error: <where>: <what>; expected <what>`, docs/robustness.md).
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace xstage::cli {

// On every option of every command that takes a value: an empty value is
// refused (`--timeline ''` would otherwise mean "no timeline" and write
// nothing), and so is nan or inf for a number (a Range check passes nan).
void refuse_empty_and_non_finite_values(CLI::App& app);

// The parser's failure (an unconvertible value, a value out of range, a
// missing or unknown option) as one line "<where>: <what>; expected <what>".
std::string documented_parse_error(CLI::App& app, const CLI::ParseError& e);

// Throws xstage::Error when one of `options` of `sub` was given: the command
// would ignore its value in this mode (`simulate --schedule` with --V).
void refuse_unused(const CLI::App& sub, const std::vector<std::string>& options, const std::string& mode);

// A count typed as a number (1000000 or 1e6): a whole number in [lo, hi].
long whole_count(double value, const std::string& option, double lo, double hi);

}  // namespace xstage::cli
