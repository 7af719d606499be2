#include "option_checks.hpp"

#include <cmath>
#include <cstdlib>
#include <regex>

#include <fmt/format.h>

#include "xstage/core/error.hpp"

namespace xstage::cli {

namespace {

bool takes_a_value(const CLI::Option* o) { return !o->get_positional() ? o->get_type_size() > 0 : true; }

bool is_floating(const CLI::Option* o) { return o->get_type_name().rfind("FLOAT", 0) == 0; }

std::string kind_of(const CLI::Option* o) {
  const std::string t = o->get_type_name();
  if (t.rfind("FLOAT", 0) == 0) return "a finite number";
  if (t.rfind("UINT", 0) == 0) return "a whole number >= 0 (digits, no exponent)";
  if (t.rfind("INT", 0) == 0) return "a whole number (digits, no exponent)";
  return "a value";
}

// The command the failure belongs to: the last subcommand the parser entered.
CLI::App* failing_command(CLI::App& app) {
  CLI::App* cmd = nullptr;
  for (CLI::App* sub : app.get_subcommands()) cmd = sub;
  return cmd;
}

const CLI::Option* find_option(const CLI::App* cmd, const std::string& name) {
  if (!cmd) return nullptr;
  for (const CLI::Option* o : cmd->get_options())
    if (o->check_name(name) || o->get_name() == name) return o;
  return nullptr;
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

}  // namespace

void refuse_empty_and_non_finite_values(CLI::App& app) {
  const CLI::Validator not_empty(
      [](std::string& v) { return v.empty() ? std::string("'': empty value; expected a value") : std::string(); }, "",
      "not empty");
  const CLI::Validator finite(
      [](std::string& v) {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        if (end != v.c_str() && !std::isfinite(x)) return fmt::format("'{}': not a finite number; expected a finite number", v);
        return std::string();
      },
      "", "finite");
  for (CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == "launch") continue;  // the command after -- passes its own arguments, empty ones too
    for (CLI::Option* o : sub->get_options()) {
      if (!takes_a_value(o) || o->get_name().empty()) continue;
      o->check(not_empty);
      if (is_floating(o)) o->check(finite);
    }
  }
}

std::string documented_parse_error(CLI::App& app, const CLI::ParseError& e) {
  CLI::App* cmd = failing_command(app);
  const std::string help = cmd ? "xstage " + cmd->get_name() + " --help" : "xstage --help";
  const std::string msg = one_line(e.what());
  std::smatch m;
  static const std::regex convert(R"(Could not convert: (\S+) = (.*))");
  // CLI11 2.1 writes "Value 0 not in range 1 to 9", 2.4 "Value 0 not in range [1 - 9]".
  static const std::regex range(R"((\S+): Value (.*) not in range \[?(\S+?)(?: to | - )(\S+?)\]?)");
  static const std::regex validator(R"((\S+): (.*; expected .*))");
  static const std::regex required(R"((.+) is required(.*))");
  static const std::regex extras(R"(The following arguments? (?:was|were) not expected: (.*))");
  if (std::regex_match(msg, m, convert)) {
    const CLI::Option* o = find_option(cmd, m[1].str());
    const std::string kind = o ? kind_of(o) : "a value of the option's kind";
    return fmt::format("{} '{}': not of the option's kind; expected {} ({})", m[1].str(), m[2].str(), kind, help);
  }
  if (std::regex_match(msg, m, range)) {
    // CLI11 prints the bounds with std::to_string ("1.000000"): as people write them.
    auto bound = [](const std::string& b) {
      char* end = nullptr;
      const double x = std::strtod(b.c_str(), &end);
      return end == b.c_str() ? b : fmt::format("{}", x);
    };
    return fmt::format("{} '{}': out of range; expected a value from {} to {}", m[1].str(), m[2].str(),
                       bound(m[3].str()), bound(m[4].str()));
  }
  if (std::regex_match(msg, m, validator)) return fmt::format("{} {}", m[1].str(), m[2].str());
  if (std::regex_match(msg, m, required))
    return fmt::format("{}: missing{}; expected it given ({})", m[1].str(), m[2].str(), help);
  if (std::regex_match(msg, m, extras))
    return fmt::format("{}: not an option or argument of {}; expected those {} lists", m[1].str(),
                       cmd ? "xstage " + cmd->get_name() : "xstage", help);
  return fmt::format("{}; expected the options {} lists", msg, help);
}

void refuse_unused(const CLI::App& sub, const std::vector<std::string>& options, const std::string& mode) {
  for (const std::string& name : options) {
    const CLI::Option* o = sub.get_option_no_throw(name);
    if (o && o->count() > 0)
      throw Error(fmt::format("{}: not used {}; expected it left out (it would be ignored)", name, mode));
  }
}

long whole_count(double value, const std::string& option, double lo, double hi) {
  if (!std::isfinite(value) || value != std::floor(value) || value < lo || value > hi)
    throw Error(fmt::format("{} {:g}: not a whole number in range; expected a whole number from {:g} to {:g}", option,
                            value, lo, hi));
  return long(value);
}

}  // namespace xstage::cli
