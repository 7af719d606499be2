#pragma once
// What a receiver's timed wait leaves behind when a flag times out (device
// memory, zeroed before the launch; the host reads it after the run and
// aborts with it: a wait never hangs, and no printf in the kernel, whose
// call made ptxas spill in the fused kernel's mainloop, perf-log f8).
namespace xstage::remote {

struct FlagTimeoutRecord {
  unsigned int set = 0;  // 1 once a receiver timed out (the first one fills the rest)
  int rank = 0, flag = 0, block = 0, thread = 0;
  unsigned long long waited_ns = 0, expected = 0, seen = 0;
};

}  // namespace xstage::remote
