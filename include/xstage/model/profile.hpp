#pragma once
// An interconnect profile: the three measured quantities of the Burst-Gap model
// (T0_iss(K,V), R, Q) for one transport, with where they came from.
//
// T0_iss form (docs/model.md, section 1): a fixed cost plus the volume over the
// issue rate, which grows with the number of producers K until it saturates.
// Each producer's first near_bytes go into its own near queue at the faster
// near_per_producer_Bps (the producer's store queue), the rest at per_producer_Bps:
//     V_near = min(V, K * near_bytes)
//     T0_iss(K, V) = fixed_ns + V_near / min(K * near_per_producer_Bps, aggregate_Bps)
//                             + (V - V_near) / min(K * per_producer_Bps, aggregate_Bps)
// near_bytes = 0 (a profile without the field) is the one-rate form
//     T0_iss(K, V) = fixed_ns + V / min(K * per_producer_Bps, aggregate_Bps).
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace xstage {

struct IssueCost {
  double fixed_ns = 0.0;          // per-burst cost independent of volume
  double per_producer_Bps = 0.0;  // issue rate of one producer (bytes/s)
  double aggregate_Bps = 0.0;     // issue rate all producers together saturate at
  // The near queue: the first near_bytes of each producer's share of a burst
  // are issued at near_per_producer_Bps. 0: no near queue (the one-rate form).
  double near_bytes = 0.0;
  double near_per_producer_Bps = 0.0;
  bool has_near() const { return near_bytes > 0; }
};

struct Provenance {
  std::string device;   // e.g. "NVIDIA H200"
  std::string driver;   // e.g. "580.159.04"
  std::string date;     // ISO 8601
  std::string commit;   // git commit of the code that measured it
  std::string command;  // exact command line
  std::string notes;
};

struct Range {
  double lo = 0.0;
  double hi = 0.0;
  bool contains(double x) const { return x >= lo * (1 - 1e-9) && x <= hi * (1 + 1e-9); }
};

// An uncertainty the data cannot give (the parameter is not identified): NaN
// in memory, null in JSON, "not identified" in tables.
inline constexpr double kNotIdentified = __builtin_nan("");

struct Uncertainty {  // one standard deviation, same units as the parameter
  double fixed_ns = 0, per_producer_Bps = 0, aggregate_Bps = 0, R_Bps = 0, Q_bytes = 0, Q_fill_bytes = 0;
  double near_bytes = 0, near_per_producer_Bps = 0, Q_cold_bytes = 0, Q_warm_per_byte = 0;
};

struct Profile {
  std::string name;       // short id, e.g. "h200-host-pcie"
  std::string transport;  // "host", "local", "peer", "nvlink4", ...
  std::string status;     // "measured", "nominal" or "placeholder"
  IssueCost t0;
  double R_Bps = 0.0;       // drain rate of the X-Stage
  double Q_bytes = 0.0;     // outstanding capacity of the X-Stage (what a drained stage absorbs)
  // What an empty stage fills up to under back-to-back bursts before the issuer
  // stalls (the transient). On the H200's host path this is far below Q: the
  // stage absorbs tens of MB after a long idle gap but only a few MB when fed
  // continuously (docs/model.md). 0: same as Q_bytes.
  double Q_fill_bytes = 0.0;
  double fill_capacity() const { return Q_fill_bytes > 0 ? Q_fill_bytes : Q_bytes; }
  // The cold start (docs/model.md, section 4): after a long idle period the
  // first burst into an empty stage absorbs only Q_cold_bytes; each byte stored
  // since then gives Q_warm_per_byte bytes of capacity back, up to Q. 0 (a
  // profile without the field): no cold start, every empty stage offers Q.
  double Q_cold_bytes = 0.0;
  double Q_warm_per_byte = 0.0;
  bool has_cold_start() const { return Q_cold_bytes > 0; }
  // What an empty stage offers a burst after `stored_bytes` have been stored since the cold start.
  double empty_capacity(double stored_bytes) const;
  double latency_ns = 0.0;  // empty-stage store-to-visibility latency (completion-coupled counterfactual)
  // Both directions of the path at once (`xstage duplex`): the rate of far
  // reads while stores into the path run, and the stores' drain while the
  // reads run. 0 and 0: not measured, and the MoE model takes the two
  // directions as independent, each at R (docs/model.md, section 9).
  double duplex_read_Bps = 0.0, duplex_store_Bps = 0.0;
  // The same probe's reads with no stores running: what the reading warps
  // reach alone (loads in flight over latency; below R where they are few).
  // 0: R.
  double duplex_read_alone_Bps = 0.0;
  bool has_duplex() const { return duplex_read_Bps > 0 && duplex_store_Bps > 0; }
  // What the fused MoE kernel's copy warps read the path at with nothing else on it.
  double copy_read_Bps() const { return duplex_read_alone_Bps > 0 ? std::min(duplex_read_alone_Bps, R_Bps) : R_Bps; }
  std::optional<Range> K_range;  // what the fit saw; predictions outside get a warning
  std::optional<Range> V_range;
  std::optional<Uncertainty> sigma;
  Provenance provenance;

  // Throws xstage::Error naming the field when a value is missing or not positive.
  void validate() const;
};

nlohmann::json to_json(const Profile& p);
Profile profile_from_json(const nlohmann::json& j, const std::string& where);
Profile load_profile(const std::string& path);          // file path or embedded name
void save_profile(const Profile& p, const std::string& path);

// Profiles compiled into the library. The first is the default.
const std::vector<Profile>& embedded_profiles();
const Profile* find_embedded_profile(const std::string& name);
const Profile& default_profile();

// Warnings for a query outside the K or V range the profile was fitted on.
std::vector<std::string> range_warnings(const Profile& p, double K, double V_bytes);

}  // namespace xstage
