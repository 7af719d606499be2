#pragma once
// A probe CSV (harness/probe/probe_sweep.hpp) fitted to a profile and, where it has
// held-out rows, validated: what `xstage probe` does after measuring and
// `xstage validate` does with a CSV recorded earlier. Everything about the
// measurement (transport, device, clock, copy engine) comes from the CSV's
// "# key: value" lines, so a CSV can be refitted later. CPU only.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "xstage/model/validate.hpp"

namespace xstage {

struct ProbeFit {
  std::string transport;
  std::string samples_csv;                     // the path the CSV came from
  std::map<std::string, std::string> measured;  // the CSV's "# key: value" lines
  double copy_engine_Bps = 0;
  FitResult fit;  // fit.profile: named after the device and transport, with provenance
  std::optional<Validation> validation;  // when validated (fit is then validation->fit)
  std::optional<uint64_t> destination_check_failures;  // recorded by a probe run, not in the CSV
};

// `command`: the command line fitting it, for the profile's provenance.
// Throws xstage::Error naming `csv_path` when a provenance line is missing.
ProbeFit fit_probe_csv(const std::string& csv, const std::string& csv_path, bool validate, int bootstrap,
                       const std::string& command);
// The same from the CSV's samples (read_samples_csv: a large file is read as it streams by).
ProbeFit fit_probe_samples(SampleSet set, const std::string& csv_path, bool validate, int bootstrap,
                           const std::string& command);

// profile-<transport>.json, and validation-<transport>.json when validated, into out_dir.
void save_probe_fit(const ProbeFit& f, const std::string& out_dir, const std::string& command);

// Every file save_probe_fit and save_probe_summary would write for `fits`
// into out_dir, written all or none: each is written aside before any is
// renamed into place. Refused before anything is written: two fits of one
// transport (their files would replace each other's) and a file that is one
// of `inputs` (validate's CSVs).
void save_probe_outputs(const std::vector<ProbeFit>& fits, const std::string& out_dir, const std::string& command,
                        const std::vector<std::string>& inputs);

// probe-validation.json: per transport R, Q, T0, copy engine and the models'
// errors (no per-point rows); nothing when none was validated.
void save_probe_summary(const std::vector<ProbeFit>& fits, const std::string& out_dir, const std::string& command);
// The text of probe-validation.json (also what `xstage validate --json` and
// `xstage probe --json` print): the same keys for every transport, the
// validation's null (`validated` false) where a fit had no held-out rows.
std::string probe_summary_json(const std::vector<ProbeFit>& fits, const std::string& command);

}  // namespace xstage
