#pragma once
// Runs the xstage command in a shell and captures what it prints.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

struct CliRun {
  int rc = -1;
  std::string out;  // stdout and stderr together
};

inline CliRun run_cli(const std::string& args) {
  const std::string cmd = std::string(XSTAGE_CLI_PATH) + " " + args + " 2>&1";
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
