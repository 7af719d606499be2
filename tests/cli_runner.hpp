#pragma once
// Runs the xstage command in a shell and captures what it prints.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

// The xstage command under test: $XSTAGE_CLI when set (binaries built on one
// machine and run on another), else the one this build made.
inline std::string xstage_cli_path() {
  const char* env = std::getenv("XSTAGE_CLI");
  return env && *env ? std::string(env) : std::string(XSTAGE_CLI_PATH);
}

struct CliRun {
  int rc = -1;
  std::string out;  // stdout and stderr together (or stdout alone)
};

// `with_stderr` false: stdout alone (what a program reading --json or --csv gets).
inline CliRun run_cli(const std::string& args, bool with_stderr = true) {
  const std::string cmd = xstage_cli_path() + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}
