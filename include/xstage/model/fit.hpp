#pragma once
// The fitter: measured bursts in, an interconnect profile out.
//
// Input CSV (any column order, other columns ignored, '#' lines are comments):
//   K, V_bytes, gap_ns, issue_ns            required
//   complete_ns                             optional: burst start to remote visibility
//   stat                                    optional: only rows whose stat is
//                                           "run" (the run as a whole, see probe.hpp) are used
//   set                                     optional: train / holdout / completion
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "xstage/model/model.hpp"
#include "xstage/model/profile.hpp"

namespace xstage {

struct Sample {  // one measured row
  double K = 0, V_bytes = 0, gap_ns = 0, issue_ns = 0;
  double complete_ns = -1;  // < 0: not measured
  long line = 0;            // line in the source file (0 if synthetic)
  std::string set;          // optional column `set`: "train", "holdout" or "completion"
  long bursts = 0;          // optional columns `bursts`, `steady_from`: issue_ns is the mean of
  long steady_from = 0;     // bursts [steady_from, bursts) of a run that started on an empty stage
};

// Measured values with how often each was measured: a probe CSV of millions
// of rows repeats its points, and a value measured again costs a count, not
// a row. Values are added, then finish() sorts and merges them.
class Tally {
 public:
  struct Entry {
    double value = 0, count = 0;
  };
  void add(double value, double count = 1);
  void add(const Tally& other);
  void finish();
  // Sorted by value, each value once (after finish(); std::logic_error before).
  const std::vector<Entry>& entries() const;
  double count() const { return count_; }
  bool empty() const { return count_ == 0; }

 private:
  void merge_pending();
  std::vector<Entry> sorted_;
  std::vector<double> pending_;
  double count_ = 0;
};

// The rows of a samples CSV that share K, V, G, window and set: what the fit
// and the validation use of them, without a copy of every row.
struct SamplePoint {
  double K = 0, V_bytes = 0, gap_ns = 0;
  long bursts = 0, steady_from = 0;  // as Sample
  std::string set;
  long line = 0;      // the first of its rows in the source file (0 if synthetic)
  Tally issue_ns;     // the measured issue times
  Tally complete_ns;  // the measured completion times, of the rows that have one
};

// Rows grouped into points, in the order each point first appears.
std::vector<SamplePoint> group_samples(const std::vector<Sample>& samples);

// What the Burst-Gap model predicts for a sample: the windowed mean where the
// sample says which bursts it averages, else the steady state.
double predicted_issue_ns(const Profile& p, const Sample& s);
double predicted_issue_ns(const Profile& p, const SamplePoint& s);

// Rows the issue-time fit uses: neither held out nor completion-mode runs
// (whose issue spans a release fence perturbs); those rows still give latency.
bool used_for_issue_fit(const std::string& set);

struct SampleSet {
  std::vector<SamplePoint> points;
  long rows = 0;  // data rows used (a probe CSV's rows whose stat is "run")
  // "# key: value" comment lines (device, driver, transport, command, ...).
  std::map<std::string, std::string> metadata;
  std::vector<std::string> header;  // the column names, in order: messages name a column by number
};

// Reads the rows one at a time into points (memory grows with the distinct
// points and values, not with the rows). Throws xstage::Error
// "<path>:<line>: <reason>" for malformed input. `progress`, when given, is
// called now and then with the fraction of the file read.
SampleSet read_samples_csv(const std::string& path, const std::function<void(double fraction)>& progress = {});
SampleSet parse_samples_csv(const std::string& text, const std::string& name);

struct FitOptions {
  int bootstrap = 40;         // resamples for the uncertainties (0: none)
  unsigned seed = 12345;
  double loss_scale = 0.05;   // relative error at which the Cauchy loss starts to flatten
  // Also try the extensions (the near queue in T0, the cold start) and keep
  // each only where the data support it (BIC on the Cauchy loss). false: the
  // one-rate T0 without a cold start, as profiles before the extensions.
  bool extensions = true;
  // Called between the fit's stages ("fitting form 2/4", "bootstrap 7/40"),
  // so that a caller can show progress on a long fit.
  std::function<void(const std::string& stage)> progress;
};

struct FitPoint {  // one (K, V, G) group of samples
  double K = 0, V_bytes = 0, gap_ns = 0;
  long n = 0;
  double measured_ns = 0;   // median of the group
  double predicted_ns = 0;
  double rel_err = 0;       // (predicted - measured) / measured
  Regime regime = Regime::free;
  long outliers = 0;        // samples of the group flagged as outliers
};

struct FitResult {
  Profile profile;
  std::vector<FitPoint> points;
  long samples = 0;
  long outliers = 0;
  double median_abs_rel_err = 0;
  bool R_identified = true;    // the samples need a drain limit (some are drain-limited, and without R they fit worse)
  bool Q_identified = true;    // some bursts overflowed a drained stage
  bool aggregate_identified = true;  // the issue rate saturated in K
  bool near_queue = false;     // the fitted T0 has a near queue (the data supported it)
  bool cold_start = false;     // the fitted profile has a cold start (the data supported it)
  double loss = 0;             // Cauchy loss of the chosen form on the training samples
  std::vector<std::string> notes;    // what the data could not pin down
};

// Fits T0 (fixed cost, per-producer and aggregate issue rate), R and Q with a
// Cauchy loss on log(predicted/measured) (outliers barely pull), Nelder-Mead
// from several starts, and bootstrap resamples for one-sigma uncertainties.
// With opt.extensions it fits four nested forms (with and without the near
// queue, with and without the cold start; the cold start only where samples
// say which bursts they average) and keeps the one with the lowest BIC,
// loss + k ln(n) / 2 for k parameters and n samples (docs/model.md, section 5).
// The drain limit (R, Q) is kept only where it earns its two parameters by
// the same rule; else R is the least rate that leaves every sample free, and
// not identified. The cost grows with the distinct points and values, not
// with the rows. The profile's transport and provenance are left for the
// caller to fill.
FitResult fit_profile(const std::vector<SamplePoint>& points, const FitOptions& opt = {});
FitResult fit_profile(const std::vector<Sample>& samples, const FitOptions& opt = {});

// Group samples by (K, V, G) and compare a profile's predictions with them.
std::vector<FitPoint> compare(const Profile& p, const std::vector<SamplePoint>& points, ModelKind model);

}  // namespace xstage
