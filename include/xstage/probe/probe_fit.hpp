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

// Every file of `fits` into out_dir (profile-<t>.json; validation-<t>.json
// and probe-validation.json where validated), written all or none: each is
// written aside before any is renamed into place. Refused before anything is
// written: two fits of one transport (their files would replace each
// other's) and a file that is one of `inputs` (validate's CSVs).
void save_probe_outputs(const std::vector<ProbeFit>& fits, const std::string& out_dir, const std::string& command,
                        const std::vector<std::string>& inputs);

// What `xstage probe` measured on one transport: the recording's CSV texts
// (harness/probe/probe_sweep.hpp) and, where enough points were measured in
// lock step, the fit. Plain data, so that the writing is tested without a GPU.
struct ProbeRun {
  std::string transport;
  std::string csv;            // probe-<transport>.csv
  std::string per_burst_csv;  // every burst's spans (--bursts-out)
  std::optional<ProbeFit> fit;
};

// Everything a probe run writes, all or none, after every transport was
// measured and fitted: probe-<t>.csv for each run, the files of the fits
// (as save_probe_outputs), and `bursts_out` (when not empty: the bursts of
// the one run; refused for several, which that CSV could not tell apart). A GPU run that measured for minutes and then fails
// to write one file leaves the folder as it was, not half-updated.
void save_probe_run(const std::vector<ProbeRun>& runs, const std::string& out_dir, const std::string& bursts_out,
                    const std::string& command);

// The text of probe-validation.json (also what `xstage validate --json` and
// `xstage probe --json` print): the same keys for every transport, the
// validation's null (`validated` false) where a fit had no held-out rows.
std::string probe_summary_json(const std::vector<ProbeFit>& fits, const std::string& command);

}  // namespace xstage
