#pragma once
#include <optional>
#include <string>

#include "table.hpp"
#include "xstage/model/profile.hpp"

namespace xstage::cli {

// The profile's T0 in words and numbers, as the model computes it (with the
// near queue's term where the profile has one): "T0 = 244 ns + V / min(...)".
std::string t0_formula(const Profile& p);

// A fitted parameter's one-sigma uncertainty as people read it: "+- 1.2 GB/s",
// "(not identified)" where the fit could not give one (kNotIdentified), ""
// where the profile has no uncertainties (a fit without bootstrap).
std::string sigma_text(const std::optional<Uncertainty>& sigma, double Uncertainty::*field,
                       std::string (*format)(double));

// The model and simulator tables for one profile (the CPU half of `report`).
// Format::csv: the issue-time grid; Format::json: every table (docs/cli-output.md).
void print_model_report(const Profile& p, int K, Format format = Format::table);
// Probe the host path of GPU 0, fit it, and print the model report of the fit.
void run_gpu_report(int K, Format format = Format::table);

}  // namespace xstage::cli
