#pragma once
// `xstage launch`: one process per rank on this host, the way torchrun
// starts them. CPU only (POSIX).
#include <string>
#include <vector>

namespace xstage {

// Starts `nprocs` copies of `command` (argv; looked up on PATH) with
//   RANK = LOCAL_RANK = i, WORLD_SIZE = LOCAL_WORLD_SIZE = nprocs,
//   NCCL_NVLS_ENABLE = 0 (NVLink multicast stays off),
//   XSTAGE_NCCL_ID_FILE = a fresh file in a private temporary folder (rank 0
//   writes the NCCL unique id there, the others read it),
// and waits for all. When one fails, the others get SIGTERM (SIGKILL after
// 5 s). Returns 0 when all succeed, else the first failure's exit code
// (128 + signal number for a signal). Throws xstage::Error when it cannot start.
int launch_local(int nprocs, const std::vector<std::string>& command);

}  // namespace xstage
