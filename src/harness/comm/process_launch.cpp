#include "harness/comm/process_launch.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "xstage/core/error.hpp"

namespace xstage {

namespace {

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

[[noreturn]] void exec_child(int rank, int nprocs, const std::string& id_file, const std::vector<std::string>& cmd) {
  const std::string r = std::to_string(rank), n = std::to_string(nprocs);
  setenv("RANK", r.c_str(), 1);
  setenv("LOCAL_RANK", r.c_str(), 1);
  setenv("WORLD_SIZE", n.c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", n.c_str(), 1);
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  setenv("XSTAGE_NCCL_ID_FILE", id_file.c_str(), 1);
  std::vector<char*> argv;
  for (const auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "xstage: error: launch: cannot run '%s': %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

// Waits for `pid` up to `seconds`; true when it was reaped.
bool reap_within(pid_t pid, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    int status = 0;
    const pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid || (got < 0 && errno == ECHILD)) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

int launch_local(int nprocs, const std::vector<std::string>& command) {
  if (nprocs < 1) throw Error(fmt::format("launch -n: expected a whole number >= 1, got {}", nprocs));
  if (command.empty()) throw Error("launch: no command given; expected xstage launch -n N -- COMMAND ...");

  char dir_template[] = "/tmp/xstage-launch-XXXXXX";
  if (!mkdtemp(dir_template))
    throw Error(fmt::format("launch: cannot create a folder in /tmp: {}; expected a writable /tmp", std::strerror(errno)));
  const std::string dir = dir_template, id_file = dir + "/nccl-unique-id";

  std::fflush(nullptr);  // children must not repeat our buffered output
  std::vector<std::pair<pid_t, int>> running;  // (pid, rank)
  for (int rank = 0; rank < nprocs; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      for (const auto& [p, r] : running) kill(p, SIGTERM);
      throw Error(fmt::format("launch: fork failed: {}; expected room for -n more processes", std::strerror(errno)));
    }
    if (pid == 0) exec_child(rank, nprocs, id_file, command);
    running.emplace_back(pid, rank);
  }

  int result = 0;
  while (!running.empty()) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    const auto it = std::find_if(running.begin(), running.end(), [&](const auto& e) { return e.first == pid; });
    if (it == running.end()) continue;  // not one of ours
    const int rank = it->second;
    running.erase(it);
    const int code = exit_code(status);
    if (code == 0) continue;
    // One rank failed: the others would wait for it forever in a collective.
    std::fprintf(stderr, "xstage: launch: rank %d exited with code %d; stopping the other %zu\n", rank, code,
                 running.size());
    result = code;
    for (const auto& [p, r] : running) kill(p, SIGTERM);
    for (const auto& [p, r] : running)
      if (!reap_within(p, 5.0)) {
        kill(p, SIGKILL);
        waitpid(p, nullptr, 0);
      }
    running.clear();
  }
  std::remove(id_file.c_str());
  rmdir(dir.c_str());
  return result;
}

}  // namespace xstage
