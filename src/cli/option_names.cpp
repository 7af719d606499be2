// Option-name clashes by the strictest CLI11 rule (option_names.hpp).
#include "option_names.hpp"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace xstage::cli {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

struct Name {
  std::string text;
  bool is_short;
};

std::vector<Name> names_of(const OptionNames& o) {
  std::vector<Name> out;
  for (const std::string& s : o.shorts) out.push_back({s, true});
  for (const std::string& l : o.longs) out.push_back({l, false});
  return out;
}

// Whether CLI11 (any version up to 2.4's rule) takes names a and b for one.
bool same(const Name& a, const Name& b, bool ignore_case) {
  const std::string x = ignore_case ? lower(a.text) : a.text;
  const std::string y = ignore_case ? lower(b.text) : b.text;
  if (x != y) return false;
  if (a.is_short == b.is_short) return true;
  return x.size() == 1;  // -h against --h: a clash from CLI11 2.4 on
}

std::string label(const OptionNames& o) {
  std::string s;
  for (const Name& n : names_of(o)) s += (s.empty() ? "" : ",") + std::string(n.is_short ? "-" : "--") + n.text;
  return s;
}

void collect(const CLI::App& app, const std::string& path, std::vector<CommandOptions>& out) {
  CommandOptions c;
  c.path = path;
  for (const CLI::Option* o : app.get_options())  // the help flags included
    c.options.push_back({o->get_snames(), o->get_lnames(), o->get_ignore_case()});
  out.push_back(std::move(c));
  for (const CLI::App* sub : app.get_subcommands({}))
    collect(*sub, path.empty() ? sub->get_name() : path + " " + sub->get_name(), out);
}

}  // namespace

std::vector<CommandOptions> command_options(const CLI::App& app) {
  std::vector<CommandOptions> out;
  collect(app, "", out);
  return out;
}

std::vector<std::string> option_name_clashes(const std::vector<CommandOptions>& commands) {
  std::vector<std::string> out;
  for (const CommandOptions& c : commands) {
    const auto& opts = c.options;
    for (size_t i = 0; i < opts.size(); ++i)
      for (size_t j = i + 1; j < opts.size(); ++j) {
        const bool ic = opts[i].ignore_case || opts[j].ignore_case;
        for (const Name& a : names_of(opts[i]))
          for (const Name& b : names_of(opts[j]))
            if (same(a, b, ic))
              out.push_back((c.path.empty() ? std::string("xstage") : c.path) + ": " + label(opts[i]) +
                            " clashes with " + label(opts[j]) + " (the name '" + a.text + "')");
      }
  }
  return out;
}

void check_option_names(const CLI::App& app) {
  const auto clashes = option_name_clashes(command_options(app));
  if (clashes.empty()) return;
  std::string msg = "option names clash (CLI11 2.4 and later refuse them at start-up): ";
  for (size_t i = 0; i < clashes.size(); ++i) msg += (i ? "; " : "") + clashes[i];
  throw std::logic_error(msg);
}

}  // namespace xstage::cli
