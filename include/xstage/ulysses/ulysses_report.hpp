#pragma once
// A recorded `xstage ulysses -o` report, read back for `xstage ulysses-predict`:
// one file of a sweep, or the merged file of several placements (a "sources"
// list, one entry per recorded file, and summary rows naming their placement).
// Every field is checked for type and range, so that a hand-edited or damaged
// report gives an xstage::Error naming the field, never a wrapped integer or a
// silently different prediction. CPU only.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "xstage/ulysses/ulysses_layout.hpp"

namespace xstage {

struct RecordedUlyssesPoint {
  int64_t S = 0;
  double attention_only_us = 0;
  std::optional<double> fused_us, sequential_us;
  std::optional<double> residual_fused;  // the report's paired residual, where it has one
  // Per store path of the fused rows at this S: the least residual over its
  // configurations (orders, flag timings, slice sizes), the paired one where
  // a row has it, else time over attention-only; and how many configurations.
  std::map<std::string, double> store_residual;
  std::map<std::string, int> store_configs;
};

struct RecordedUlyssesSeries {
  std::string placement;       // "host" or "device" ("" in a single report without one)
  std::string buffers;         // the rows' placement field ("host", "device"; "" if they have none)
  UlyssesShape shape;          // S of the first point; each point has its own
  bool emulated = true;        // backend "emulated" (all ranks on one GPU); "peer", "nccl": one rank a GPU
  int block_m = 0, concurrent_tiles = 0;
  std::string profile;         // the profile the run was predicted with
  std::string local_profile;   // "" when the report names none
  std::vector<RecordedUlyssesPoint> points;
};

// Throws xstage::Error "<name>: <field>: <what was expected>".
std::vector<RecordedUlyssesSeries> parse_ulysses_report(const std::string& json_text, const std::string& name);
std::vector<RecordedUlyssesSeries> read_ulysses_report(const std::string& path);

}  // namespace xstage
