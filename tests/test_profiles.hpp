#pragma once
// A profile with the given parameters, for tests of the model, simulator and fitter.
#include "xstage/model/profile.hpp"

inline xstage::Profile make_profile(double fixed_ns, double per_producer_Bps, double aggregate_Bps, double R_Bps,
                                    double Q_bytes, double latency_ns = 0) {
  xstage::Profile p;
  p.name = "test";
  p.status = "measured";
  p.t0 = {fixed_ns, per_producer_Bps, aggregate_Bps};
  p.R_Bps = R_Bps;
  p.Q_bytes = Q_bytes;
  p.latency_ns = latency_ns;
  return p;
}
