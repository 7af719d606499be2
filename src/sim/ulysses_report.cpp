#include "xstage/ulysses/ulysses_report.hpp"

#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/input_file.hpp"
#include "xstage/core/error.hpp"
#include "xstage/core/limits.hpp"

namespace xstage {

namespace {
using nlohmann::json;

// Shapes beyond these are no run a GPU made; they also keep the tile count
// and the payload in range of the simulator (xstage/core/limits.hpp).
constexpr int64_t kMaxRanks = 1024, kMaxBatch = 1 << 16, kMaxSeq = int64_t(1) << 24, kMaxHeads = 1 << 12,
                  kMaxHeadDim = 1024, kMaxBlock = 1 << 12, kMaxSlots = kMaxProducers;

const json& at(const json& j, const char* key, const std::string& where) {
  if (!j.is_object()) throw Error(fmt::format("{}: expected an object", where));
  auto it = j.find(key);
  if (it == j.end()) throw Error(fmt::format("{}: no \"{}\" (expected an `xstage ulysses -o` report)", where, key));
  return *it;
}

// A whole number in [lo, hi]: 4096.7, 2^31 or null are errors, not a
// truncated, wrapped or default value.
int64_t whole(const json& j, const char* key, int64_t lo, int64_t hi, const std::string& where) {
  const json& v = at(j, key, where);
  double d = 0;
  if (v.is_number_integer())
    d = v.is_number_unsigned() ? double(v.get<uint64_t>()) : double(v.get<int64_t>());
  else if (v.is_number_float())
    d = v.get<double>();
  else
    throw Error(fmt::format("{}: \"{}\" is {}; expected a whole number in [{}, {}]", where, key, v.dump(), lo, hi));
  if (!(d >= double(lo) && d <= double(hi)) || d != std::floor(d))
    throw Error(fmt::format("{}: \"{}\" is {}; expected a whole number in [{}, {}]", where, key, v.dump(), lo, hi));
  return static_cast<int64_t>(d);
}

std::string text(const json& j, const char* key, const std::string& where) {
  const json& v = at(j, key, where);
  if (!v.is_string()) throw Error(fmt::format("{}: \"{}\" is {}; expected a string", where, key, v.dump()));
  return v.get<std::string>();
}

// An optional time: absent or null is "not measured"; present must be a finite number >= 0.
std::optional<double> optional_us(const json& j, const char* key, const std::string& where, bool signed_ok = false) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number() || !std::isfinite(it->get<double>()) || (!signed_ok && it->get<double>() < 0))
    throw Error(fmt::format("{}: \"{}\" is {}; expected {}", where, key, it->dump(),
                            signed_ok ? "a finite number or null" : "a finite number >= 0 or null"));
  return it->get<double>();
}

bool emulated_backend(const std::string& backend, const std::string& where) {
  if (backend == "emulated") return true;
  if (backend == "peer" || backend == "nccl") return false;
  throw Error(fmt::format("{}: \"backend\" is \"{}\"; expected emulated, peer or nccl", where, backend));
}

// The run's settings: at the top of a single report, in each source of a merged one.
void read_settings(const json& src, const std::string& where, RecordedUlyssesSeries& s) {
  s.block_m = static_cast<int>(whole(src, "block_m", 1, kMaxBlock, where));
  s.concurrent_tiles = static_cast<int>(whole(src, "concurrent_tiles", 1, kMaxSlots, where));
  s.profile = text(src, "profile", where);
  auto lp = src.find("local_profile");
  if (lp != src.end() && !lp->is_null()) {
    if (!lp->is_string()) throw Error(fmt::format("{}: \"local_profile\" is {}; expected a string or null", where, lp->dump()));
    if (*lp != "none") s.local_profile = lp->get<std::string>();
  }
}

void read_shape(const json& row, const std::string& where, RecordedUlyssesSeries& s) {
  s.shape.P = static_cast<int>(whole(row, "P", 1, kMaxRanks, where));
  s.shape.B = whole(row, "B", 1, kMaxBatch, where);
  s.shape.S = 1;  // each summary point has its own S
  s.shape.H = whole(row, "H", 1, kMaxHeads, where);
  s.shape.D = whole(row, "D", 1, kMaxHeadDim, where);
  s.emulated = emulated_backend(text(row, "backend", where), where);
  auto pl = row.find("placement");
  if (pl != row.end() && pl->is_string()) s.buffers = pl->get<std::string>();
  UlyssesLayout check(s.shape);  // H % P and overflow
  (void)check;
}

RecordedUlyssesPoint read_point(const json& e, const std::string& where) {
  RecordedUlyssesPoint p;
  p.S = whole(e, "S", 1, kMaxSeq, where);
  const json& att = at(e, "attention_only_us", where);
  // null: no attention-only run at this S (the point is skipped by the caller).
  if (!att.is_null()) {
    if (!att.is_number() || !std::isfinite(att.get<double>()) || att.get<double>() < 0)
      throw Error(fmt::format("{}: \"attention_only_us\" is {}; expected a finite number >= 0 or null", where,
                              att.dump()));
    p.attention_only_us = att.get<double>();
  }
  p.fused_us = optional_us(e, "fused_us", where);
  p.sequential_us = optional_us(e, "sequential_us", where);
  p.residual_fused = optional_us(e, "residual_fused", where, /*signed_ok=*/true);
  return p;
}

// The fused rows' residual per store path, into their series' points.
void read_store_residuals(const json& rows, const std::string& name, std::vector<RecordedUlyssesSeries>& out) {
  for (size_t i = 0; i < rows.size(); ++i) {
    const json& r = rows[i];
    if (!r.is_object() || r.value("variant", json()) != "fused") continue;
    const std::string where = fmt::format("{}: rows[{}]", name, i);
    const std::string store = text(r, "store", where);
    const int64_t S = whole(r, "S", 1, kMaxSeq, where);
    const json placement = r.value("placement", json());
    for (RecordedUlyssesSeries& s : out) {
      if (!s.placement.empty() && placement != s.placement) continue;
      for (RecordedUlyssesPoint& p : s.points) {
        if (p.S != S || !(p.attention_only_us > 0)) continue;
        std::optional<double> res = optional_us(r, "residual_paired", where, /*signed_ok=*/true);
        if (!res) {
          const std::optional<double> t = optional_us(r, "time_us", where);
          if (!t || !(*t > 0)) continue;
          res = *t / p.attention_only_us - 1;
        }
        auto it = p.store_residual.find(store);
        if (it == p.store_residual.end() || *res < it->second) p.store_residual[store] = *res;
        ++p.store_configs[store];
      }
    }
  }
}

}  // namespace

std::vector<RecordedUlyssesSeries> parse_ulysses_report(const std::string& json_text, const std::string& name) {
  json rep;
  try {
    rep = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: not JSON ({})", name, e.what()));
  }
  if (!rep.is_object()) throw Error(fmt::format("{}: expected a JSON object (an `xstage ulysses -o` report)", name));
  const json& rows = at(rep, "rows", name);
  const json& summary = at(rep, "summary", name);
  if (!rows.is_array() || rows.empty() || !summary.is_array())
    throw Error(fmt::format("{}: expected non-empty \"rows\" and a \"summary\" list", name));

  std::vector<RecordedUlyssesSeries> out;
  if (!rep.contains("sources")) {
    RecordedUlyssesSeries s;
    read_settings(rep, name, s);
    read_shape(rows.front(), name + ": rows[0]", s);
    for (size_t i = 0; i < summary.size(); ++i) s.points.push_back(read_point(summary[i], fmt::format("{}: summary[{}]", name, i)));
    out.push_back(std::move(s));
    read_store_residuals(rows, name, out);
    return out;
  }
  // Merged: every summary row names its placement; its settings are those of
  // the source whose world has that placement's buffers.
  const json& sources = at(rep, "sources", name);
  if (!sources.is_array() || sources.empty()) throw Error(fmt::format("{}: \"sources\" is not a list of sources; expected a non-empty list", name));
  for (size_t i = 0; i < summary.size(); ++i) {
    const std::string where = fmt::format("{}: summary[{}]", name, i);
    const std::string placement = text(summary[i], "placement", where);
    RecordedUlyssesSeries* series = nullptr;
    for (auto& s : out)
      if (s.placement == placement) series = &s;
    if (!series) {
      RecordedUlyssesSeries s;
      s.placement = placement;
      const json* src = nullptr;
      for (size_t k = 0; k < sources.size(); ++k) {
        const std::string world = text(sources[k], "world", fmt::format("{}: sources[{}]", name, k));
        if (world.find(placement + " buffers") == std::string::npos) continue;
        if (src) throw Error(fmt::format("{}: two sources have {} buffers; expected one source a placement", name, placement));
        src = &sources[k];
      }
      if (!src) throw Error(fmt::format("{}: no source has {} buffers (placement of {}); expected one source a placement", name, placement, where));
      read_settings(*src, fmt::format("{}: source of placement {}", name, placement), s);
      const json* row = nullptr;
      for (size_t k = 0; k < rows.size() && !row; ++k)
        if (rows[k].is_object() && rows[k].value("placement", json()) == placement) row = &rows[k];
      if (!row) throw Error(fmt::format("{}: no row has placement {}; expected a row of each placement in the summary", name, placement));
      read_shape(*row, fmt::format("{}: first row of placement {}", name, placement), s);
      out.push_back(std::move(s));
      series = &out.back();
    }
    series->points.push_back(read_point(summary[i], where));
  }
  if (out.empty()) throw Error(fmt::format("{}: the summary is empty; expected at least one point with an attention-only time", name));
  read_store_residuals(rows, name, out);
  return out;
}

std::vector<RecordedUlyssesSeries> read_ulysses_report(const std::string& path) {
  return parse_ulysses_report(detail::read_whole_file(path, false, detail::kMaxDocumentBytes, "a recorded Ulysses report JSON"), path);
}

}  // namespace xstage
