#pragma once
#include "table.hpp"
#include "xstage/profile.hpp"

namespace xstage::cli {

// The model and simulator tables for one profile (the CPU half of `report`).
// Format::csv: the issue-time grid; Format::json: every table (docs/cli-output.md).
void print_model_report(const Profile& p, int K, Format format = Format::table);
// Probe the host path of GPU 0, fit it, and print the model report of the fit.
void run_gpu_report(int K, Format format = Format::table);

}  // namespace xstage::cli
