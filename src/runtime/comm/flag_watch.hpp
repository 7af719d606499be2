#pragma once
// A host thread watching flags that another agent (a kernel over PCIe, or a
// test's thread) sets: each flag, the moment it holds `value`, is handed to
// `on_seen`, which checks what the flag vouches for. Pure host code, so a CPU
// test checks that a flag set before its data is caught. Internal to
// src/runtime (UlyssesAttention::check_flags_in_flight).
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace xstage {

struct FlagWatch {
  std::string problem;        // the first problem on_seen reported; "" when none
  std::vector<size_t> unseen;  // flags that did not reach the value before the deadline
  int seen_while_running = 0;  // flags first seen while running() was true
};

// Polls every flag until all hold `value`, or the writer has stopped and one
// more pass has looked at every flag, or `timeout_s` passes. on_seen(i)
// returns "" or a problem with flag i's data; running() says whether the
// writer is still at work (the flags seen while it is are counted, and once
// it is not, whatever has not come by the next pass will not come).
template <class OnSeen, class Running>
FlagWatch watch_flags(const std::vector<const uint64_t*>& flags, uint64_t value, double timeout_s, OnSeen on_seen,
                      Running running) {
  FlagWatch w;
  std::vector<bool> seen(flags.size(), false);
  size_t left = flags.size();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool last_pass = false;
  while (left > 0 && !last_pass && std::chrono::steady_clock::now() < deadline) {
    last_pass = !running();
    for (size_t i = 0; i < flags.size(); ++i) {
      if (seen[i]) continue;
      // Acquire: the data's reads in on_seen come after the flag's.
      if (std::atomic_ref<uint64_t>(const_cast<uint64_t&>(*flags[i])).load(std::memory_order_acquire) != value)
        continue;
      seen[i] = true;
      --left;
      if (running()) ++w.seen_while_running;
      if (w.problem.empty()) w.problem = on_seen(i);
    }
  }
  for (size_t i = 0; i < flags.size(); ++i)
    if (!seen[i]) w.unseen.push_back(i);
  return w;
}

}  // namespace xstage
