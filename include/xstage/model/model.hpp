#pragma once
// The Burst-Gap model (docs/model.md) and the two counterfactuals it refutes.
//
//   T_iss(G; K, V) = max( T0_iss(K, V),  V/R - min(G, G_cap) ),
//   G_cap = max(0, Q/R - fixed_ns)
//
// The paper's steady-state law is the case G < G_cap. A longer gap cannot
// help further: the stage is empty by the time the next burst starts issuing
// bytes, and that burst has to push V - Q bytes through the drain.
#include <limits>
#include <string>

#include "xstage/model/profile.hpp"

namespace xstage {

enum class Regime { free, drain };
const char* to_string(Regime r);

struct Prediction {
  double t_iss_ns = 0;        // issuer-visible issue time of one burst (steady state)
  double t0_ns = 0;           // backpressure-free issue time T0_iss(K,V)
  double drain_ns = 0;        // V/R - min(G, G_cap): what the drain imposes
  double gap_cap_ns = 0;      // G_cap: the longest gap that still shortens the burst
  Regime regime = Regime::free;
  double onset_gap_ns = 0;    // G* = V/R - T0: gaps shorter than this stall; +inf if none helps
  bool exceeds_capacity = false;  // V > Q + R*(T0 - fixed): a burst stalls even after an infinite gap
  double stall_ns = 0;        // t_iss - t0: time lost to backpressure per burst
  double period_ns = 0;       // t_iss + G: steady-state period of burst+gap
  double utilisation = 0;     // G / period: fraction of time the producer computes
  double transient_bursts = 0;  // bursts issued stall-free into an empty stage before steady state (+inf if never stalls)
};

// T0_iss(K, V): the one-rate form, or with a near queue the two-rate fill of
// each producer's near queue (profile.hpp, docs/model.md section 1).
double t0_iss_ns(const Profile& p, double K, double V_bytes);
// Steady state of a warm stage (the cold start of section 4 only enters the windowed mean).
Prediction predict(const Profile& p, double K, double V_bytes, double gap_ns);

// Issue time of burst n (0, 1, ...) of a run that started on a cold stage,
// when that burst starts on an empty stage: max(T0, fixed + (V - C_n)/R) with
// C_n = min(Q, Q_cold + n V Q_warm_per_byte) (C_n = Q without a cold start).
double cold_burst_ns(const Profile& p, double K, double V_bytes, double n);

// Mean issue time of bursts [first, last) of a run that starts with an empty
// (and, where the profile has a cold start, cold) stage. What a finite
// measurement sees (docs/model.md, section 4):
// - where every burst starts on an empty stage (free regime, or gaps past
//   G_cap): burst n takes cold_burst_ns(n), T_iss once the stage is warm;
// - in the drain regime: burst 0 takes cold_burst_ns(0); if it fits, bursts up
//   to transient_bursts are free (T0), the rest steady (T_iss).
// A profile without a cold start gives the first transient_bursts free and
// the rest steady, as before.
double windowed_issue_ns(const Profile& p, double K, double V_bytes, double gap_ns, long first, long last);

// Issue time of a single burst into an empty X-Stage: max(T0, fixed + (V - Q)/R).
// (Equal to predict() with G >= G_cap.)
double single_burst_ns(const Profile& p, double K, double V_bytes);

// Counterfactuals.
// completion-coupled: the issuer waits until the burst is remotely visible,
//   so the drain and the latency are always on its critical path: max(T0, V/R) + L.
double completion_coupled_ns(const Profile& p, double K, double V_bytes, double gap_ns);
// unbounded-asynchronous: issue never stalls: T0.
double unbounded_async_ns(const Profile& p, double K, double V_bytes, double gap_ns);

enum class ModelKind { burst_gap, completion_coupled, unbounded_async };
const char* to_string(ModelKind m);
double model_issue_ns(ModelKind m, const Profile& p, double K, double V_bytes, double gap_ns);

inline constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace xstage
