#pragma once
#include "xstage/profile.hpp"

namespace xstage::cli {

// The model and simulator tables for one profile (the CPU half of `report`).
void print_model_report(const Profile& p, int K);
// Probe the host path of GPU 0, fit it, and print the model report of the fit.
void run_gpu_report(int K);

}  // namespace xstage::cli
