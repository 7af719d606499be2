#pragma once
// Every subcommand registers itself on the app; main() lists them.
#include <CLI/CLI.hpp>

#include "table.hpp"

namespace xstage::cli {

void add_report_command(CLI::App& app);
void add_predict_command(CLI::App& app);
void add_simulate_command(CLI::App& app);
void add_fit_command(CLI::App& app);
void add_profiles_command(CLI::App& app);
void add_probe_command(CLI::App& app);
void add_a2a_command(CLI::App& app);
void add_launch_command(CLI::App& app);
void add_selftest_command(CLI::App& app);
void add_attn_command(CLI::App& app);
void add_ulysses_command(CLI::App& app);
void add_ulysses_predict_command(CLI::App& app);
void add_moe_gemm_command(CLI::App& app);
void add_moe_predict_command(CLI::App& app);
void add_moe_command(CLI::App& app);
void add_visible_command(CLI::App& app);
void add_duplex_command(CLI::App& app);

// --json / --csv flags shared by every command that prints results.
struct OutputFlags {
  bool json = false;
  bool csv = false;
  Format format() const { return json ? Format::json : csv ? Format::csv : Format::table; }
};
void add_output_flags(CLI::App* sub, OutputFlags& f);

// Prints a warning line to stderr ("xstage: warning: ...").
void warn(const std::string& msg);

// Now, UTC, ISO 8601 ("2026-11-30T02:31:18Z"), for provenance.
std::string utc_now_iso();

// The command line as typed, for provenance.
const std::string& command_line();
void set_command_line(int argc, char** argv);

}  // namespace xstage::cli
