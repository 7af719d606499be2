#include "harness/probe/probe_sweep.hpp"

#include <cmath>

#include "xstage/core/error.hpp"

namespace xstage {

namespace {
constexpr double KiB = 1024, MiB = 1024 * 1024, us = 1000;

std::vector<double> gaps(double first_us, int n) {
  std::vector<double> g = {0};
  for (int i = 0; i < n; ++i) g.push_back(first_us * std::pow(2.0, i) * us);
  return g;
}
}  // namespace

std::vector<PlannedPoint> plan_sweep(const std::string& sweep, Transport t, int sms) {
  if (sweep != "quick" && sweep != "full")
    throw Error("--sweep: unknown value '" + sweep + "'; expected quick or full");
  const bool full = sweep == "full";
  // Volumes scale with the path: host PCIe drains at ~50 GB/s, local and peer at TB/s-class rates.
  const double s = t == Transport::host ? 1.0 : 4.0;
  // The largest volumes exceed the stage's capacity Q (tens of MB on the host
  // path), so that long gaps show the (V - Q)/R floor and pin Q down.
  const std::vector<double> train_V = {256 * KiB * s, 1 * MiB * s, 4 * MiB * s, 16 * MiB * s, 64 * MiB * s};
  const std::vector<double> hold_V = {384 * KiB * s, 1.5 * MiB * s, 6 * MiB * s, 24 * MiB * s};
  // Gaps from well inside the drain regime to well past the capacity cap Q/R.
  const std::vector<double> train_G = gaps(t == Transport::host ? 0.5 : 0.0625, t == Transport::host ? 13 : 11);
  const std::vector<double> hold_G = gaps(t == Transport::host ? 0.7 : 0.0875, t == Transport::host ? 12 : 10);
  std::vector<int> train_K = {sms / 8, sms / 2, sms};
  std::vector<int> hold_K = {sms / 4, sms};
  if (full) train_K = {sms / 8, sms / 4, sms / 2, sms, 2 * sms};

  ProbePoint base;  // default: 8 warps, 16-byte stores, spin gaps
  base.bursts = 96;
  std::vector<PlannedPoint> out;
  auto add = [&](ProbePoint p, const char* set) { out.push_back({p, set}); };
  auto grid = [&](const std::vector<int>& Ks, const std::vector<double>& Vs, const std::vector<double>& Gs,
                  const char* set, ProbePoint from) {
    for (int K : Ks)
      for (double V : Vs)
        for (double G : Gs) {
          ProbePoint p = from;
          p.K = K;
          p.V_bytes = V;
          p.gap_ns = G;
          add(p, set);
        }
  };
  grid(train_K, train_V, train_G, "train", base);
  grid(hold_K, hold_V, hold_G, "holdout", base);
  // BurstCompletion: bursts far apart, so each drains before the next.
  for (BurstCompletion c : {BurstCompletion::fence, BurstCompletion::flag})
    for (double V : train_V) {
      ProbePoint p = base;
      p.K = sms;
      p.V_bytes = V;
      p.gap_ns = 2000 * us;
      p.bursts = 12;
      p.completion = c;
      add(p, "completion");
    }
  // One factor at a time away from the default, at three gaps around the knee.
  const double Vx = train_V[2];
  const std::vector<double> Gx = {0, train_G[train_G.size() / 2], train_G.back()};
  auto explore = [&](auto&& mutate, int n) {
    for (int i = 0; i < n; ++i)
      for (double G : Gx) {
        ProbePoint p = base;
        p.K = sms;
        p.V_bytes = Vx;
        p.gap_ns = G;
        if (mutate(p, i)) add(p, "explore");
      }
  };
  const int warps[] = {1, 2, 4, 16, 32};
  const StoreKind stores[] = {StoreKind::b32, StoreKind::b64, StoreKind::bulk};
  const GapKind gapk[] = {GapKind::fma, GapKind::mma};
  explore([&](ProbePoint& p, int i) { p.store = stores[i]; return true; }, 3);
  explore([&](ProbePoint& p, int i) { p.gap = gapk[i]; return true; }, 2);
  if (full) {
    explore([&](ProbePoint& p, int i) { p.warps = warps[i]; return true; }, 5);
    const int Ks[] = {1, 4, 16};
    explore([&](ProbePoint& p, int i) { p.K = Ks[i]; return true; }, 3);
    // Store kinds across the whole gap range at the default K.
    for (StoreKind st : stores) {
      ProbePoint from = base;
      from.store = st;
      grid({sms}, {Vx}, train_G, "explore", from);
    }
  }
  return out;
}

}  // namespace xstage
