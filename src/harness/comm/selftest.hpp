#pragma once
// Checks that exercise failure paths on purpose.
#include <cstdint>

namespace xstage {

// Launches a kernel that, as logical rank `rank`, waits for flag `flag_id`
// (in mapped host memory, never set) to reach 1. The wait times out after
// timeout_ns through the library's timed wait, which records rank, flag,
// expected and seen values and ends the kernel. Throws xstage::Error naming
// them (or saying that the timeout did not fire); it never returns normally.
[[noreturn]] void selftest_flag_timeout(uint64_t timeout_ns, int rank, int flag_id);

}  // namespace xstage
