// xstage: the X-Stage toolkit command. One file per subcommand beside this one.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "commands.hpp"
#include "option_checks.hpp"
#include "option_names.hpp"
#include "util/utc_now.hpp"
#include "xstage/core/build_info.hpp"
#include "xstage/core/error.hpp"

namespace xstage::cli {

namespace {
std::string g_command_line;
}

void add_output_flags(CLI::App* sub, OutputFlags& f) {
  auto* j = sub->add_flag("--json", f.json, "JSON output for programs");
  auto* c = sub->add_flag("--csv", f.csv, "CSV output for programs");
  j->excludes(c);
}

void warn(const std::string& msg) {
  std::cout.flush();
  std::fprintf(stderr, "xstage: warning: %s\n", msg.c_str());
}

const std::string& command_line() { return g_command_line; }

std::string utc_now_iso() { return detail::utc_now_iso(); }

void set_command_line(int argc, char** argv) {
  g_command_line.clear();
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    const bool quote = a.find_first_of(" \t'\"") != std::string::npos;
    g_command_line += (i ? " " : "") + (quote ? "'" + a + "'" : a);
  }
}

}  // namespace xstage::cli

namespace {
CLI::App* find_command(CLI::App& app, const std::string& name) {
  for (CLI::App* sub : app.get_subcommands({}))
    if (sub->get_name() == name) return sub;
  return nullptr;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace xstage::cli;
  set_command_line(argc, argv);
  CLI::App app{"xstage: measure, model and hide the X-Stage of device-initiated remote stores"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every command");
  add_report_command(app);
  add_predict_command(app);
  add_simulate_command(app);
  add_fit_command(app);
  add_profiles_command(app);
  add_a2a_command(app);
  add_launch_command(app);
  add_selftest_command(app);
  add_probe_command(app);
  add_attn_command(app);
  add_ulysses_command(app);
  add_ulysses_predict_command(app);
  add_moe_gemm_command(app);
  add_moe_predict_command(app);
  add_moe_command(app);
  add_visible_command(app);
  add_duplex_command(app);
  refuse_empty_and_non_finite_values(app);
  app.set_version_flag("--version", std::string("xstage ") + XSTAGE_VERSION + " (" + xstage::build_commit() + ")");
  try {
    check_option_names(app);  // what a newer CLI11 would refuse at start-up, refused here on any version
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xstage: internal error: %s\n", e.what());
    return 3;
  }
  if (argc >= 2 && std::string(argv[1]) == "help") {  // `xstage help [command]`, as people type it
    CLI::App* sub = argc >= 3 ? find_command(app, argv[2]) : nullptr;
    std::cout << (sub ? sub->help() : app.help());
    return argc >= 3 && !sub ? 2 : 0;
  }
  if (argc >= 2 && argv[1][0] != '-' && !find_command(app, argv[1])) {
    std::string known;
    for (const CLI::App* sub : app.get_subcommands({})) known += (known.empty() ? "" : ", ") + sub->get_name();
    std::fprintf(stderr, "xstage: error: unknown command '%s'; the commands are %s; expected one of them (xstage --help)\n", argv[1],
                 known.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // One line in the documented form, not the parser's two-line text.
    std::cout.flush();
    std::fprintf(stderr, "xstage: error: %s\n", xstage::readable_message(documented_parse_error(app, e)).c_str());
    return 2;
  } catch (const xstage::Error& e) {
    std::cout.flush();
    // The documented form ends in what was expected; a message that does not
    // say it points at the command's help, which does.
    std::string m = e.what();
    if (m.find("expected") == std::string::npos) {
      const auto parsed = app.get_subcommands();
      m += "; expected what `xstage " + (parsed.empty() ? std::string() : parsed.back()->get_name() + " ") +
           "--help` describes";
    }
    std::fprintf(stderr, "xstage: error: %s\n", m.c_str());
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {  // e.g. an output folder that cannot be made
    std::cout.flush();
    std::fprintf(stderr, "xstage: error: %s; expected a path this user may read or write\n",
                 xstage::readable_message(e.what()).c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xstage: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
