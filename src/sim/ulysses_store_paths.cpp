// The fused Ulysses kernel's store paths through the X-Stage simulator
// (include/xstage/ulysses/ulysses_store_paths.hpp).
#include "xstage/ulysses/ulysses_store_paths.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>

#include <fmt/format.h>

#include "util/csv.hpp"
#include "xstage/core/error.hpp"
#include "xstage/model/model.hpp"
#include "xstage/model/simulator.hpp"

namespace xstage {

const std::vector<std::string>& modelled_store_paths() {
  static const std::vector<std::string> paths{"vector16", "vector16-wt", "vector16-cs", "bulk",
                                              "paced",    "paced-bulk",  "paced-warp"};
  return paths;
}

StorePathSchedule store_path_schedule(const std::string& path) {
  if (path == "vector16" || path == "vector16-wt" || path == "vector16-cs") return {false, false, false};
  if (path == "bulk") return {false, true, false};
  if (path == "paced") return {true, false, false};
  if (path == "paced-bulk") return {true, true, true};
  if (path == "paced-warp") return {true, false, true};
  throw Error(fmt::format("store path \"{}\": expected one of vector16, vector16-wt, vector16-cs, bulk, paced, "
                          "paced-bulk, paced-warp",
                          path));
}

StorePathKernel wgmma_store_path_kernel(const UlyssesKernelShape& kernel, int64_t S, int64_t D) {
  if (S < 1 || D < 1) throw Error(fmt::format("wgmma_store_path_kernel: expected S, D >= 1, got {}, {}", S, D));
  StorePathKernel k;
  k.kernel = kernel;
  constexpr int64_t kBlockN = 128;  // 128-key tiles at both head dims
  k.kv_steps = (S + kBlockN - 1) / kBlockN;
  k.prefetch_steps = D > 64 ? 2 : 4;  // the K/V ring: as many stages as fit shared memory (config_wgmma.cuh)
  return k;
}

namespace {

// The CTA's program for `tiles` tiles of `tile_ns` compute and `tile_bytes` each.
Program slot_program(int64_t tiles, double tile_ns, double tile_bytes, const StorePathKernel& k, bool sliced,
                     int slices, bool coupled) {
  Program p;
  if (tiles < 1) return p;
  const double step_ns = tile_ns / double(k.kv_steps);
  if (!sliced) {
    // The ring's first stages were loaded before the stores; the rest of the
    // tile's loads queue behind them.
    const double ahead_ns = std::min(tile_ns, step_ns * double(k.prefetch_steps));
    p.steps = {coupled ? Step::wait_drain(ahead_ns) : Step::compute(ahead_ns), Step::compute(tile_ns - ahead_ns),
               Step::store(tile_bytes)};
    p.repeat = tiles;
    return p;
  }
  // Slice j of the previous tile goes out at the start of every n/m-step
  // stretch of this tile's mainloop; the first tile has nothing to send, the
  // last goes at once at the CTA's exit.
  const double slice_bytes = tile_bytes / double(slices);
  const double stretch_ns = tile_ns / double(slices);
  p.steps.push_back(Step::compute(tile_ns));
  for (int64_t t = 1; t < tiles; ++t)
    for (int j = 0; j < slices; ++j) {
      p.steps.push_back(Step::store(slice_bytes));
      p.steps.push_back(Step::compute(stretch_ns));
    }
  p.steps.push_back(Step::store(tile_bytes));
  p.repeat = 1;
  return p;
}

}  // namespace

StorePathPrediction predict_store_path(const Profile& profile, const StorePathKernel& k, const std::string& path,
                                       const StorePathOptions& opt, const Profile* local) {
  const StorePathSchedule sched = store_path_schedule(path);
  const UlyssesKernelShape& s = k.kernel;
  const UlyssesTileSchedule ts = ulysses_tile_schedule(profile, s, local, "predict_store_path");
  if (k.kv_steps < 1 || k.prefetch_steps < 0 || k.tile_rows < 1 || k.paced_rows < 1)
    throw Error(fmt::format("predict_store_path: expected kv_steps, tile_rows, paced_rows >= 1 and prefetch_steps >= 0, "
                            "got {}, {}, {}, {}",
                            k.kv_steps, k.tile_rows, k.paced_rows, k.prefetch_steps));
  if (!(opt.bulk_drain_ratio > 0) || opt.bulk_drain_ratio > 1e3)
    throw Error(fmt::format("predict_store_path: the bulk drain ratio is {}; expected a value in (0, 1000]",
                            opt.bulk_drain_ratio));
  const int64_t slots = ts.slots, waves = ts.waves, full = ts.full;
  const double tile_bytes = ts.tile_bytes, tile_ns = ts.tile_ns;
  const int slices = sched.sliced ? int(std::max<int64_t>(
                                        1, std::min<int64_t>(k.kv_steps, (k.tile_rows + k.paced_rows - 1) / k.paced_rows)))
                                  : 1;
  const bool coupled = opt.load_coupling && !sched.sliced && tile_bytes > profile.t0.near_bytes;
  std::vector<Program> programs;
  programs.reserve(size_t(slots));
  for (int64_t c = 0; c < slots; ++c) {
    Program p = slot_program(c < full ? waves : waves - 1, tile_ns, tile_bytes, k, sched.sliced, slices, coupled);
    if (!p.steps.empty()) programs.push_back(std::move(p));
  }
  StageConfig stage = stage_from_profile(profile);
  if (sched.bulk_copies) stage.R_Bps *= opt.bulk_drain_ratio;
  const SimResult r = simulate(stage, programs);
  const double latency_ns = s.payload_bytes > 0 ? profile.latency_ns : 0.0;
  StorePathPrediction out;
  out.fused_us = (std::max(r.total_ns, r.drained_ns) + 2 * latency_ns) * 1e-3;
  out.residual = out.fused_us / s.attention_only_us - 1;
  out.stalled_us = r.stalled_ns * 1e-3;
  out.drain_wait_us = r.drain_wait_ns * 1e-3;
  out.slices = slices;
  return out;
}

void OwnCost::add(const std::string& path, int64_t S, double fraction) {
  if (S < 1 || !std::isfinite(fraction))
    throw Error(fmt::format("OwnCost: path {}: expected S >= 1 and a finite fraction, got {} and {}", path, S, fraction));
  by_path_[path][S] = fraction;
}

double OwnCost::at(const std::string& path, int64_t S) const {
  auto it = by_path_.find(path);
  if (it == by_path_.end() || it->second.empty()) return 0.0;
  const std::map<int64_t, double>& m = it->second;
  auto hi = m.lower_bound(S);
  if (hi == m.end()) return std::prev(m.end())->second;
  if (hi->first == S || hi == m.begin()) return hi->second;
  auto lo = std::prev(hi);
  const double x = (std::log(double(S)) - std::log(double(lo->first))) /
                   (std::log(double(hi->first)) - std::log(double(lo->first)));
  return lo->second + x * (hi->second - lo->second);
}

double bulk_drain_ratio_from_probe(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  std::vector<std::string> header;
  // (K, V, gap) -> (sum of sustained rates, count) per store kind
  std::map<std::tuple<std::string, std::string, std::string>, std::pair<double, double>> bulk, v4;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> cells = detail::split_csv_line(line, fmt::format("{}:{}", name, lineno));
    if (header.empty()) {
      header = cells;
      continue;
    }
    auto col = [&](const char* key) -> std::string {
      for (size_t i = 0; i < header.size(); ++i)
        if (header[i] == key) return i < cells.size() ? cells[i] : std::string();
      throw Error(fmt::format("{}: no column \"{}\" (expected an `xstage probe -o` CSV)", name, key));
    };
    const std::string store = col("store");
    if ((store != "bulk" && store != "v4") || col("stat") != "run" || col("gap_kind") != "spin") continue;
    double rate = 0;
    try {
      rate = std::stod(col("sustained_Bps"));
    } catch (const std::exception&) {
      throw Error(fmt::format("{}:{}: sustained_Bps is \"{}\"; expected a number", name, lineno, col("sustained_Bps")));
    }
    if (!(rate > 0) || !std::isfinite(rate))
      throw Error(fmt::format("{}:{}: sustained_Bps is {}; expected a positive finite rate", name, lineno, rate));
    auto& slot = (store == "bulk" ? bulk : v4)[{col("K"), col("V_bytes"), col("gap_ns")}];
    slot.first += rate;
    slot.second += 1;
  }
  double sum_bulk = 0, sum_v4 = 0;
  int pairs = 0;
  for (const auto& [key, b] : bulk) {
    auto it = v4.find(key);
    if (it == v4.end()) continue;
    sum_bulk += b.first / b.second;
    sum_v4 += it->second.first / it->second.second;
    ++pairs;
  }
  if (pairs == 0)
    throw Error(fmt::format("{}: no (K, V, gap) with spin-gap `run` rows of both bulk and v4 stores; expected at least one such pair",
                            name));
  return sum_bulk / sum_v4;
}

namespace {

std::vector<double> average_ranks(const std::vector<double>& v) {
  std::vector<size_t> idx(v.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> rank(v.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
    for (size_t k = i; k <= j; ++k) rank[idx[k]] = 0.5 * double(i + j);
    i = j + 1;
  }
  return rank;
}

}  // namespace

RankAgreement rank_agreement(const std::vector<double>& measured, const std::vector<double>& predicted, double tie) {
  if (measured.size() != predicted.size())
    throw Error(fmt::format("rank_agreement: {} measured and {} predicted values; expected as many of each", measured.size(),
                            predicted.size()));
  RankAgreement a;
  a.n = int(measured.size());
  if (a.n < 2) {
    a.spearman = std::nan("");
    return a;
  }
  const std::vector<double> rm = average_ranks(measured), rp = average_ranks(predicted);
  double mm = 0, mp = 0;
  for (int i = 0; i < a.n; ++i) mm += rm[i], mp += rp[i];
  mm /= a.n, mp /= a.n;
  double sxy = 0, sxx = 0, syy = 0;
  for (int i = 0; i < a.n; ++i) {
    sxy += (rm[i] - mm) * (rp[i] - mp);
    sxx += (rm[i] - mm) * (rm[i] - mm);
    syy += (rp[i] - mp) * (rp[i] - mp);
  }
  a.spearman = sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : std::nan("");
  // Agreement counted in halves, so that a predicted tie counts half a pair.
  int halves = 0, resolved_halves = 0;
  for (int i = 0; i < a.n; ++i)
    for (int j = i + 1; j < a.n; ++j) {
      const double dm = measured[j] - measured[i], dp = predicted[j] - predicted[i];
      if (dm == 0) continue;  // a measured tie says nothing about order
      const int h = dp == 0 ? 1 : (dm > 0) == (dp > 0) ? 2 : 0;
      ++a.pairs;
      halves += h;
      if (std::abs(dm) > tie) {
        ++a.resolved_pairs;
        resolved_halves += h;
      }
    }
  a.agreed = 0.5 * halves;
  a.resolved_agreed = 0.5 * resolved_halves;
  return a;
}

}  // namespace xstage
