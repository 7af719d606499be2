#include "xstage/model/profile.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/input_file.hpp"
#include "util/replace_file.hpp"
#include "xstage/core/error.hpp"
#include "xstage/core/limits.hpp"

namespace xstage {

using nlohmann::json;

// Rates and capacities outside these bounds are no interconnect; inside them
// every prediction for sizes and times within xstage/core/limits.hpp stays a
// finite number (1e-300 B/s would print "inf" and "nan%").
constexpr double kMinRateBps = 1.0, kMaxRateBps = 1e18, kMinCapacityBytes = 1.0;

void Profile::validate() const {
  auto positive = [&](double v, const char* field) {
    if (!(v > 0) || !std::isfinite(v))
      throw Error(fmt::format("profile '{}': {} is {}; expected a positive finite number", name, field, v));
  };
  auto rate = [&](double v, const char* field) {
    positive(v, field);
    if (v < kMinRateBps || v > kMaxRateBps)
      throw Error(fmt::format("profile '{}': {} is {}; expected a rate from {:g} to {:g} bytes/s", name, field, v,
                              kMinRateBps, kMaxRateBps));
  };
  auto bounded = [&](double v, double most, const char* field) {
    if (v > most) throw Error(fmt::format("profile '{}': {} is {}; expected at most {:g}", name, field, v, most));
  };
  bounded(t0.fixed_ns, kMaxTimeNs, "t0.fixed_ns");
  bounded(latency_ns, kMaxTimeNs, "latency_ns");
  bounded(Q_bytes, kMaxBytes, "Q_bytes");
  bounded(t0.near_bytes, kMaxBytes, "t0.near_bytes");
  bounded(Q_warm_per_byte, 1e6, "Q_warm_per_byte");
  if (!(t0.fixed_ns >= 0) || !std::isfinite(t0.fixed_ns))
    throw Error(fmt::format("profile '{}': t0.fixed_ns is {}; expected a finite number >= 0", name, t0.fixed_ns));
  rate(t0.per_producer_Bps, "t0.per_producer_Bps");
  rate(t0.aggregate_Bps, "t0.aggregate_Bps");
  rate(R_Bps, "R_Bps");
  positive(Q_bytes, "Q_bytes");
  if (Q_bytes < kMinCapacityBytes)
    throw Error(fmt::format("profile '{}': Q_bytes is {}; expected at least {:g} byte", name, Q_bytes, kMinCapacityBytes));
  if (!(Q_fill_bytes >= 0) || !std::isfinite(Q_fill_bytes) || Q_fill_bytes > Q_bytes * (1 + 1e-12))
    throw Error(fmt::format("profile '{}': Q_fill_bytes is {}; expected a value in [0, Q_bytes = {}]", name, Q_fill_bytes,
                            Q_bytes));
  if (!(latency_ns >= 0) || !std::isfinite(latency_ns)) throw Error(fmt::format("profile '{}': latency_ns is {}; expected a finite number >= 0", name, latency_ns));
  if (!(t0.near_bytes >= 0) || !std::isfinite(t0.near_bytes))
    throw Error(fmt::format("profile '{}': t0.near_bytes is {}; expected a finite number >= 0", name, t0.near_bytes));
  if (t0.has_near()) rate(t0.near_per_producer_Bps, "t0.near_per_producer_Bps (with t0.near_bytes > 0)");
  if (!(Q_cold_bytes >= 0) || !std::isfinite(Q_cold_bytes) || Q_cold_bytes > Q_bytes * (1 + 1e-12))
    throw Error(fmt::format("profile '{}': Q_cold_bytes is {}; expected a value in [0, Q_bytes = {}]", name, Q_cold_bytes,
                            Q_bytes));
  if (!(Q_warm_per_byte >= 0) || !std::isfinite(Q_warm_per_byte))
    throw Error(fmt::format("profile '{}': Q_warm_per_byte is {}; expected a finite number >= 0", name, Q_warm_per_byte));
  if (duplex_read_Bps != 0 || duplex_store_Bps != 0) {
    rate(duplex_read_Bps, "duplex.read_Bps (with duplex.store_Bps)");
    rate(duplex_store_Bps, "duplex.store_Bps (with duplex.read_Bps)");
  }
  if (duplex_read_alone_Bps != 0) rate(duplex_read_alone_Bps, "duplex.read_alone_Bps");
}

double Profile::empty_capacity(double stored_bytes) const {
  if (!has_cold_start()) return Q_bytes;
  return std::min(Q_bytes, Q_cold_bytes + Q_warm_per_byte * std::max(0.0, stored_bytes));
}

namespace {

json range_json(const std::optional<Range>& r) {
  if (!r) return nullptr;
  return json{{"min", r->lo}, {"max", r->hi}};
}

std::optional<Range> range_from(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  const json& r = j[key];
  if (!r.is_object() || !r.contains("min") || !r.contains("max") || !r["min"].is_number() ||
      !r["max"].is_number())
    throw Error(fmt::format("{}: '{}' is not a range; expected an object {{\"min\": number, \"max\": number}}", where, key));
  const Range range{r["min"].get<double>(), r["max"].get<double>()};
  if (!(range.lo <= range.hi))
    throw Error(fmt::format("{}: '{}' is [{}, {}]; expected min <= max", where, key, range.lo, range.hi));
  return range;
}

double number_at(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) throw Error(fmt::format("{}: missing key '{}'; expected a number there", where, key));
  if (!j[key].is_number()) throw Error(fmt::format("{}: '{}' is not a number; expected a number", where, key));
  return j[key].get<double>();
}

// An optional number: absent or null is `fallback` (an extension the profile does not have).
double optional_number_at(const json& j, const char* key, const std::string& where, double fallback = 0.0) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  return number_at(j, key, where);
}

std::string string_at(const json& j, const char* key, const std::string& where, const std::string& fallback = "") {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_string())  // "name": 5 is a mistake, not an unnamed profile
    throw Error(fmt::format("{}: '{}' is {}; expected a string", where, key, j[key].dump().substr(0, 80)));
  return j[key].get<std::string>();
}

}  // namespace

json to_json(const Profile& p) {
  // The same keys for every profile (docs/cli-output.md): an extension the
  // profile does not have (near queue, cold start) is null, and so is an
  // uncertainty the fit could not give (kNotIdentified is NaN, written null).
  const json none;
  auto near = [&](double v) { return p.t0.has_near() ? json(v) : none; };
  auto cold = [&](double v) { return p.has_cold_start() ? json(v) : none; };
  json t0{{"form", p.t0.has_near() ? "fixed_ns + V_near / min(K * near_per_producer_Bps, aggregate_Bps) + (V - V_near) "
                                     "/ min(K * per_producer_Bps, aggregate_Bps), V_near = min(V, K * near_bytes)"
                                   : "fixed_ns + V / min(K * per_producer_Bps, aggregate_Bps)"},
          {"fixed_ns", p.t0.fixed_ns},
          {"per_producer_Bps", p.t0.per_producer_Bps},
          {"aggregate_Bps", p.t0.aggregate_Bps},
          {"near_bytes", near(p.t0.near_bytes)},
          {"near_per_producer_Bps", near(p.t0.near_per_producer_Bps)}};
  json sigma = none;
  if (p.sigma)
    sigma = {{"fixed_ns", p.sigma->fixed_ns},
             {"per_producer_Bps", p.sigma->per_producer_Bps},
             {"aggregate_Bps", p.sigma->aggregate_Bps},
             {"R_Bps", p.sigma->R_Bps},
             {"Q_bytes", p.sigma->Q_bytes},
             {"Q_fill_bytes", p.sigma->Q_fill_bytes},
             {"near_bytes", near(p.sigma->near_bytes)},
             {"near_per_producer_Bps", near(p.sigma->near_per_producer_Bps)},
             {"Q_cold_bytes", cold(p.sigma->Q_cold_bytes)},
             {"Q_warm_per_byte", cold(p.sigma->Q_warm_per_byte)}};
  return {{"name", p.name},
          {"transport", p.transport},
          {"status", p.status},
          {"t0", t0},
          {"R_Bps", p.R_Bps},
          {"Q_bytes", p.Q_bytes},
          {"Q_fill_bytes", p.fill_capacity()},
          {"Q_cold_bytes", cold(p.Q_cold_bytes)},
          {"Q_warm_per_byte", cold(p.Q_warm_per_byte)},
          {"latency_ns", p.latency_ns},
          {"duplex", p.has_duplex() ? json{{"read_Bps", p.duplex_read_Bps},
                                           {"store_Bps", p.duplex_store_Bps},
                                           {"read_alone_Bps", p.duplex_read_alone_Bps > 0
                                                                  ? json(p.duplex_read_alone_Bps)
                                                                  : none}}
                                      : none},
          {"K_range", range_json(p.K_range)},
          {"V_range", range_json(p.V_range)},
          {"sigma", sigma},
          {"provenance", {{"device", p.provenance.device},
                          {"driver", p.provenance.driver},
                          {"date", p.provenance.date},
                          {"commit", p.provenance.commit},
                          {"command", p.provenance.command},
                          {"notes", p.provenance.notes}}}};
}

Profile profile_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw Error(fmt::format("{}: not a profile; expected a JSON object", where));
  Profile p;
  p.name = string_at(j, "name", where, "unnamed");
  p.transport = string_at(j, "transport", where, "unknown");
  p.status = string_at(j, "status", where, "measured");
  if (!j.contains("t0") || !j["t0"].is_object())
    throw Error(fmt::format("{}: missing object 't0'; expected an object with fixed_ns, per_producer_Bps, aggregate_Bps", where));
  const json& t0 = j["t0"];
  p.t0.fixed_ns = number_at(t0, "fixed_ns", where + ": t0");
  p.t0.per_producer_Bps = number_at(t0, "per_producer_Bps", where + ": t0");
  p.t0.aggregate_Bps = number_at(t0, "aggregate_Bps", where + ": t0");
  // Optional (absent or null: the one-rate form, as profiles written before the near queue).
  p.t0.near_bytes = optional_number_at(t0, "near_bytes", where + ": t0");
  p.t0.near_per_producer_Bps = optional_number_at(t0, "near_per_producer_Bps", where + ": t0");
  p.R_Bps = number_at(j, "R_Bps", where);
  p.Q_bytes = number_at(j, "Q_bytes", where);
  p.Q_fill_bytes = optional_number_at(j, "Q_fill_bytes", where);
  p.latency_ns = optional_number_at(j, "latency_ns", where);
  // Optional (absent or null: no cold start).
  p.Q_cold_bytes = optional_number_at(j, "Q_cold_bytes", where);
  p.Q_warm_per_byte = optional_number_at(j, "Q_warm_per_byte", where);
  // Optional (absent or null: not measured, the directions independent).
  if (j.contains("duplex") && !j["duplex"].is_null()) {
    if (!j["duplex"].is_object())
      throw Error(fmt::format("{}: 'duplex' is not an object; expected an object (read_Bps, store_Bps) or null", where));
    p.duplex_read_Bps = number_at(j["duplex"], "read_Bps", where + ": duplex");
    p.duplex_store_Bps = number_at(j["duplex"], "store_Bps", where + ": duplex");
    p.duplex_read_alone_Bps = optional_number_at(j["duplex"], "read_alone_Bps", where + ": duplex");
  }
  p.K_range = range_from(j, "K_range", where);
  p.V_range = range_from(j, "V_range", where);
  if (j.contains("sigma") && !j["sigma"].is_null() && !j["sigma"].is_object())
    throw Error(fmt::format("{}: 'sigma' is not an object; expected an object of uncertainties or null", where));
  if (j.contains("sigma") && j["sigma"].is_object()) {
    const json& s = j["sigma"];
    const std::string w = where + ": sigma";
    // null: the fit could not identify the parameter (kNotIdentified), or
    // (`applies` false) the profile does not have the extension.
    auto opt = [&](const char* key, bool applies = true) {
      if (!s.contains(key) || !applies) return 0.0;
      return s[key].is_null() ? kNotIdentified : number_at(s, key, w);
    };
    Uncertainty u;
    u.fixed_ns = opt("fixed_ns");
    u.per_producer_Bps = opt("per_producer_Bps");
    u.aggregate_Bps = opt("aggregate_Bps");
    u.R_Bps = opt("R_Bps");
    u.Q_bytes = opt("Q_bytes");
    u.Q_fill_bytes = opt("Q_fill_bytes");
    u.near_bytes = opt("near_bytes", p.t0.has_near());
    u.near_per_producer_Bps = opt("near_per_producer_Bps", p.t0.has_near());
    u.Q_cold_bytes = opt("Q_cold_bytes", p.has_cold_start());
    u.Q_warm_per_byte = opt("Q_warm_per_byte", p.has_cold_start());
    p.sigma = u;
  }
  if (j.contains("provenance") && j["provenance"].is_object()) {
    const json& pr = j["provenance"];
    p.provenance = {string_at(pr, "device", where), string_at(pr, "driver", where), string_at(pr, "date", where),
                    string_at(pr, "commit", where), string_at(pr, "command", where), string_at(pr, "notes", where)};
  }
  try {
    p.validate();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", where, e.what()));
  }
  return p;
}

Profile load_profile(const std::string& path) {
  // A name that is nothing on disk may be an embedded profile; anything that
  // is there is read as a file, through the one reader (a folder or
  // /dev/zero is refused, a file over the document cap too).
  if (!detail::input_exists(path)) {
    if (const Profile* p = find_embedded_profile(path)) return *p;
    std::string known;
    for (const auto& e : embedded_profiles()) known += (known.empty() ? "" : ", ") + e.name;
    throw Error(fmt::format("profile '{}': no such file, and no embedded profile of that name; expected a file or "
                            "one of {}",
                            path, known));
  }
  std::string text;
  try {
    text = detail::read_whole_file(path, false, detail::kMaxDocumentBytes, "a profile JSON");
  } catch (const Error& e) {
    throw Error(fmt::format("profile {}", e.what()));
  }
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw Error(fmt::format("{}: invalid JSON at byte {}: {}", path, e.byte, e.what()));
  } catch (const json::exception& e) {  // e.g. a number out of range
    throw Error(fmt::format("{}: invalid JSON: {}", path, e.what()));
  }
  return profile_from_json(j, path);
}

void save_profile(const Profile& p, const std::string& path) {
  p.validate();
  detail::write_file_replacing(path, to_json(p).dump(2) + "\n", "profile");
}

std::vector<std::string> range_warnings(const Profile& p, double K, double V) {
  std::vector<std::string> w;
  if (p.K_range && !p.K_range->contains(K))
    w.push_back(fmt::format("K = {} is outside the range the profile '{}' was fitted on [{}, {}]", K, p.name,
                            p.K_range->lo, p.K_range->hi));
  if (p.V_range && !p.V_range->contains(V))
    w.push_back(fmt::format("V = {} bytes is outside the range the profile '{}' was fitted on [{}, {}] bytes", V,
                            p.name, p.V_range->lo, p.V_range->hi));
  if (p.status != "measured")
    w.push_back(fmt::format("profile '{}' is {}, not measured", p.name, p.status));
  return w;
}

}  // namespace xstage
