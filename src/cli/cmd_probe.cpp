// xstage probe: placeholder until the probe kernels land (issue 3).
#include <iostream>

#include "report.hpp"
#include "xstage/error.hpp"

namespace xstage::cli {
void run_gpu_report(int) { throw Error("report: the probe is not built yet; run with --cpu"); }
}  // namespace xstage::cli
