// Reads a recorded MoE layer sweep (include/xstage/moe/moe_sweep_record.hpp).
#include "xstage/moe/moe_sweep_record.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/input_file.hpp"
#include "xstage/core/error.hpp"

namespace xstage {

namespace {
using nlohmann::json;

constexpr const char* kExpected = "expected an `xstage moe` sweep, docs/design/moe-model.md";

// One JSON object and where it sits in the file, for the error messages.
class Obj {
 public:
  Obj(const json& j, std::string where) : j_(j), where_(std::move(where)) {
    if (!j_.is_object()) throw Error(fmt::format("{}: expected an object, got {}", where_, j_.dump().substr(0, 60)));
  }
  const std::string& where() const { return where_; }
  const json& need(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end()) throw Error(fmt::format("{}: no \"{}\"; expected it, as an `xstage moe` sweep has it (docs/design/moe-model.md)", where_,
                                                 key));
    return *it;
  }
  const json* maybe(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  [[noreturn]] void bad(const char* key, const std::string& expected, const json& got) const {
    throw Error(fmt::format("{}: \"{}\" must be {}, got {}", where_, key, expected, got.dump().substr(0, 60)));
  }
  int integer(const char* key, long lo, long hi) const {
    const json& v = need(key);
    const std::string expected = fmt::format("a whole number in [{}, {}]", lo, hi);
    if (!v.is_number()) bad(key, expected, v);
    const double d = v.get<double>();
    if (!(d >= double(lo) && d <= double(hi)) || d != std::floor(d)) bad(key, expected, v);
    return int(d);
  }
  std::string text(const char* key) const {
    const json& v = need(key);
    if (!v.is_string()) bad(key, "a string", v);
    return v.get<std::string>();
  }
  std::string text_or_empty(const char* key) const {
    const json* v = maybe(key);
    if (!v) return "";
    if (!v->is_string()) bad(key, "a string or null", *v);
    return v->get<std::string>();
  }
  std::optional<double> number(const char* key) const {
    const json* v = maybe(key);
    if (!v) return std::nullopt;
    if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < 0)
      bad(key, "a finite number >= 0 or null", *v);
    return v->get<double>();
  }
  // A list of times (null entries are rounds that did not run: skipped, and
  // counted in `skipped` if given).
  std::vector<double> times(const json& v, const std::string& key, size_t* skipped = nullptr) const {
    std::vector<double> out;
    if (v.is_null()) return out;
    if (!v.is_array()) bad(key.c_str(), "a list of times in ms or null", v);
    for (const json& x : v) {
      if (x.is_null()) {
        if (skipped) ++*skipped;
        continue;
      }
      if (!x.is_number() || !std::isfinite(x.get<double>()) || x.get<double>() < 0)
        bad(key.c_str(), "a list of finite times >= 0 (ms)", x);
      out.push_back(x.get<double>());
    }
    return out;
  }

 private:
  const json& j_;
  std::string where_;
};

MoeShape read_shape(const Obj& c) {
  MoeShape s;
  s.name = c.text_or_empty("shape");
  s.hidden = c.integer("hidden", 256, 1 << 20);
  s.inter = c.integer("inter", 128, 1 << 20);
  s.experts = c.integer("experts", 1, 1 << 16);
  s.topk = c.integer("topk", 1, s.experts);
  return s;
}

// The model-guided plan is one the kernel runs as expert-wave or as the
// share schedule; its "schedule" says which ("expert-wave": the waves, any
// other: the share rule). The other keys name their schedule.
MoeSchedulePlan read_plan(const Obj& p, MoeSchedule s) {
  MoeSchedulePlan plan;
  plan.schedule = s;
  if (s == MoeSchedule::model_guided && p.text_or_empty("schedule") == "expert-wave")
    plan.schedule = MoeSchedule::expert_wave;
  if (p.maybe("wave_tiles")) plan.wave_tiles = p.integer("wave_tiles", 0, 1 << 30);
  if (auto v = p.number("l2_share")) {
    if (*v > 1) p.bad("l2_share", "a share in [0, 1]", json(*v));
    plan.l2_share = *v;
  }
  if (p.maybe("lag_tiles")) plan.lag_tiles = p.integer("lag_tiles", 0, 1 << 30);
  return plan;
}

RecordedMoeConfig read_config(const Obj& c) {
  RecordedMoeConfig r;
  MoeConfig& m = r.config;
  m.shape = read_shape(c);
  m.tokens = c.integer("tokens", 1, 1 << 24);
  m.P = c.integer("P", 1, 1024);
  if (m.shape.experts % m.P != 0)
    throw Error(fmt::format("{}: \"P\" = {} does not divide the {} experts; expected a divisor of them", c.where(), m.P,
                            m.shape.experts));
  m.backend = c.text("backend");
  if (m.backend != "emulated" && m.backend != "peer" && m.backend != "nccl")
    c.bad("backend", "emulated, peer or nccl", c.need("backend"));
  m.placement = c.text("placement");
  if (m.placement != "host" && m.placement != "device") c.bad("placement", "host or device", c.need("placement"));
  m.routing = c.text("routing");
  if (m.routing != "uniform" && m.routing != "zipf") c.bad("routing", "uniform or zipf", c.need("routing"));
  const std::string tile = c.text_or_empty("tile");
  if (tile == "m128n256")
    m.tile = MoeTile::m128n256;
  else if (tile == "m64n256")
    m.tile = MoeTile::m64n256;
  else if (!tile.empty() && tile != "auto")
    c.bad("tile", "m128n256, m64n256, auto or null", c.need("tile"));
  if (const json* rows = c.maybe("rows_per_rank")) {
    if (!rows->is_array() || rows->size() != size_t(m.P))
      c.bad("rows_per_rank", fmt::format("a list of P = {} row counts or null", m.P), *rows);
    const double cap = double(m.tokens) * m.P * m.shape.topk;
    for (const json& x : *rows) {
      if (!x.is_number() || x.get<double>() < 0 || x.get<double>() > cap || x.get<double>() != std::floor(x.get<double>()))
        c.bad("rows_per_rank", fmt::format("whole row counts in [0, T P k = {:g}]", cap), x);
      m.rows_per_rank.push_back(int(x.get<double>()));
    }
  }
  if (const json* plans = c.maybe("plans")) {
    const Obj ps(*plans, c.where() + ": plans");
    for (MoeSchedule s : {MoeSchedule::expert_wave, MoeSchedule::interleaved, MoeSchedule::model_guided}) {
      const std::string key = moe_schedule_name(s);
      if (const json* p = ps.maybe(key.c_str())) m.plans[s] = read_plan(Obj(*p, ps.where() + "." + key), s);
    }
  }
  r.bytes_dispatch = c.number("bytes_dispatch").value_or(0);
  r.bytes_combine = c.number("bytes_combine").value_or(0);
  const Obj ms(c.need("ms"), c.where() + ": ms");
  for (const auto& [k, v] : c.need("ms").items()) r.ms[k] = ms.times(v, k, &r.ms_skipped[k]);
  if (const json* ph = c.maybe("phase_ms")) {
    const Obj phases(*ph, c.where() + ": phase_ms");
    for (const auto& [variant, per] : ph->items()) {
      if (per.is_null()) continue;
      const Obj one(per, phases.where() + "." + variant);
      for (const auto& [phase, v] : per.items()) r.phase_ms[variant][phase] = one.times(v, phase);
    }
  }
  return r;
}

}  // namespace

std::string moe_schedule_name(MoeSchedule s) {
  switch (s) {
    case MoeSchedule::expert_wave: return "expert-wave";
    case MoeSchedule::interleaved: return "interleaved";
    case MoeSchedule::model_guided: return "model-guided";
  }
  return "?";
}

RecordedMoeSweep parse_moe_sweep(const std::string& text, const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // a syntax error, or a number out of range (33e333): found by fuzz_moe_sweep
    throw Error(fmt::format("{}: not JSON ({}); {}", name, e.what(), kExpected));
  }
  const Obj top(j, name);
  RecordedMoeSweep s;
  s.device = top.text_or_empty("device");
  s.commit = top.text_or_empty("commit");
  s.date = top.text_or_empty("date");
  s.profile = top.text_or_empty("profile");
  if (const json* probe = top.maybe("probe")) s.probe_R_Bps = Obj(*probe, name + ": probe").number("R_GBps");
  if (s.probe_R_Bps) *s.probe_R_Bps *= 1e9;
  const json& configs = top.need("configs");
  if (!configs.is_array() || configs.empty()) top.bad("configs", "a non-empty list of configurations", configs);
  for (size_t i = 0; i < configs.size(); ++i)
    s.configs.push_back(read_config(Obj(configs[i], fmt::format("{}: configs[{}]", name, i))));
  return s;
}

RecordedMoeSweep read_moe_sweep(const std::string& path) {
  return parse_moe_sweep(detail::read_whole_file(path, false, detail::kMaxDocumentBytes, "a recorded MoE sweep JSON"), path);
}

double moe_median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::optional<double> moe_compute_only_experts_ms(const RecordedMoeConfig& c, std::string* source) {
  auto phase = [&](const std::string& variant, const char* p) -> std::optional<double> {
    auto v = c.phase_ms.find(variant);
    if (v == c.phase_ms.end()) return std::nullopt;
    auto x = v->second.find(p);
    if (x == v->second.end() || x->second.empty()) return std::nullopt;
    return moe_median(x->second);
  };
  if (auto e = phase("compute-only", "experts")) {
    if (source) *source = "compute-only experts phase";
    return e;
  }
  auto all = c.ms.find("compute-only");
  if (all == c.ms.end() || all->second.empty()) return std::nullopt;
  // A compute-only run that dispatches copies the rows in the pull kernel, as
  // the unfused variant does (the fused variant's dispatch phase plans only).
  std::optional<double> dispatch = phase("compute-only", "dispatch");
  std::string from = "compute-only less its dispatch phase";
  if (!dispatch || !(*dispatch > 0)) {
    dispatch = phase("unfused", "dispatch");
    from = "compute-only less the unfused dispatch phase";
  }
  if (!dispatch) return std::nullopt;
  const double experts = moe_median(all->second) - *dispatch;
  if (!(experts > 0)) return std::nullopt;
  if (source) *source = from;
  return experts;
}

}  // namespace xstage
