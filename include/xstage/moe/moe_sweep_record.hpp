#pragma once
// A recorded MoE layer sweep (results/<machine>/moe-sweep.json, written by
// `xstage moe`; format in docs/design/moe-model.md), read back for `xstage
// moe-predict`. Every field the prediction uses is checked for type and
// range: a damaged file gives an xstage::Error naming the file, the
// configuration and the field, and what was expected. CPU only.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "xstage/moe/moe_prediction.hpp"

namespace xstage {

struct RecordedMoeConfig {
  MoeConfig config;  // shape, tokens, P, backend, placement, routing, tile, rows_per_rank, plans
  // Per round, per variant: "fused/expert-wave", "fused/interleaved",
  // "fused/model-guided", "unfused", "compute-only" (absent or null: empty).
  std::map<std::string, std::vector<double>> ms;
  // Per variant, the null rounds left out of `ms` (then its rounds no longer
  // line up with another variant's by index).
  std::map<std::string, size_t> ms_skipped;
  // Per variant, per phase ("dispatch", "experts", "combine"), per round.
  std::map<std::string, std::map<std::string, std::vector<double>>> phase_ms;
  double bytes_dispatch = 0, bytes_combine = 0;  // as recorded (0 when null)
};

struct RecordedMoeSweep {
  std::string device, commit, date;
  std::string profile;                 // the profile the run planned with ("" when null)
  std::optional<double> probe_R_Bps;   // the probe's R in the same process, if measured
  std::vector<RecordedMoeConfig> configs;
};

// Throws xstage::Error "<name>: configs[i]: \"field\": <what was expected>".
RecordedMoeSweep parse_moe_sweep(const std::string& json_text, const std::string& name);
RecordedMoeSweep read_moe_sweep(const std::string& path);

// The median of the rounds (NaN when there are none).
double moe_median(std::vector<double> v);

// The measured time of the fused kernel alone without remote stores, in ms:
// the compute-only variant's "experts" phase, else its whole time less its
// (or else the unfused variant's: both copy the rows in the pull kernel)
// measured dispatch phase. nullopt when the
// record has neither; `source` says which was used.
std::optional<double> moe_compute_only_experts_ms(const RecordedMoeConfig& c, std::string* source = nullptr);

}  // namespace xstage
