// xstage ulysses's measurement (src/harness/ulysses/ulysses_bench.hpp).
#include "harness/ulysses/ulysses_bench.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/core/paired_stats.hpp"
#include "harness/core/timing.hpp"
#include "util/replace_file.hpp"
#include "xstage/core/error.hpp"
#include "xstage/model/profile.hpp"
#include "xstage/ulysses/ulysses_chunks.hpp"
#include "xstage/ulysses/ulysses_prediction.hpp"

namespace xstage {

namespace {

// "fused paced(16)/linear/at-exit", "sequential copy-engine", "pipelined copy-engine/4",
// "attention-only".
std::string config_label(const UlyssesBenchRow& r) {
  if (r.variant == "sequential") return r.variant + " " + r.a2a;
  if (r.variant == "pipelined") return fmt::format("{} {}/{}x{}", r.variant, r.a2a, r.chunks, r.row_chunks);
  if (r.store == "-") return r.variant;
  return r.variant + " " + r.store + (r.paced_rows > 0 ? fmt::format("({})", r.paced_rows) : "") + "/" + r.order +
         "/" + r.flags;
}

// Every timed run of one S in the order it ran: S, run, configuration, time,
// and the configuration of the run before it.
void append_timeline(std::string& csv, int64_t S, const PairedTimes& timed, const std::vector<UlyssesBenchRow>& rows,
                     size_t first_row) {
  if (csv.empty()) csv = "S,run,config,time_us,after\n";
  for (size_t i = 0; i < timed.order.size(); ++i)
    csv += fmt::format("{},{},{},{:.3f},{}\n", S, i, config_label(rows[first_row + timed.order[i]]), timed.flat[i],
                       i > 0 ? config_label(rows[first_row + timed.order[i - 1]]) : "-");
}

}  // namespace

Profile load_local_profile(const std::string& name) {
  try {
    return load_profile(name);
  } catch (const Error& e) {
    throw Error(fmt::format("--local-profile: {}", e.what()));
  }
}

void validate_ulysses_options(UlyssesBenchOptions& o) {
  resolve_world_ranks(o.world, 8);
  if (o.seqs.empty()) throw Error("--seq: expected at least one sequence length");
  for (int64_t S : o.seqs)
    if (S < 1) throw Error(fmt::format("--seq: expected lengths >= 1, got {}", S));
  if (o.head_dim != 64 && o.head_dim != 128)
    throw Error(fmt::format("--head-dim: expected 64 or 128, got {}", o.head_dim));
  if (o.batch < 1 || o.heads < 1)
    throw Error(fmt::format("--batch and --heads: expected >= 1, got {} and {}", o.batch, o.heads));
  if (o.world.ranks >= 1 && o.heads % o.world.ranks != 0)
    throw Error(fmt::format("--heads {} does not split over {} ranks; expected a head count the ranks divide (H % P = 0)", o.heads, o.world.ranks));
  if (o.iters < 1) throw Error(fmt::format("--iters: expected >= 1, got {}", o.iters));
  if (o.warmup < 0) throw Error(fmt::format("--warmup: expected >= 0, got {}", o.warmup));
  if (!(o.timeout_s > 0)) throw Error(fmt::format("--timeout: expected a positive time, got {} s", o.timeout_s));
  if (!(o.max_seconds_per_point > 0))
    throw Error(fmt::format("--max-seconds: expected a positive time, got {}", o.max_seconds_per_point));
  for (A2aVersion v : o.a2a)
    if (v == A2aVersion::nccl && o.world.backend != Backend::nccl)
      throw Error("--a2a nccl: NCCL's all-to-all needs --backend nccl; expected --backend nccl or another --a2a");
  for (int n : o.chunks) {
    if (n < 1) throw Error(fmt::format("--chunks: expected head chunks >= 1, got {}", n));
    // Once P is known (peer learns it from the GPUs): a chunk holds at least one of a rank's heads.
    if (o.world.ranks >= 1 && o.heads % o.world.ranks == 0 && n > o.heads / o.world.ranks)
      throw Error(fmt::format("--chunks {}: a rank holds {} heads (H / P = {} / {}); expected 1 .. {} chunks", n,
                              o.heads / o.world.ranks, o.heads, o.world.ranks, o.heads / o.world.ranks));
  }
  for (int n : o.row_chunks)
    if (n < 1 || n > kMaxPipelineChunks)
      throw Error(fmt::format("--row-chunks: expected row chunks 1 .. {}, got {}", kMaxPipelineChunks, n));
  for (int h : o.chunks.empty() ? std::vector<int>{1} : o.chunks)
    for (int n : o.row_chunks.empty() ? std::vector<int>{1} : o.row_chunks)
      if (h * n > kMaxPipelineChunks)
        throw Error(fmt::format("--chunks {} x --row-chunks {}: expected at most {} chunks in all", h, n,
                                kMaxPipelineChunks));
  if ((!o.chunks.empty() || !o.row_chunks.empty()) && !o.variants.empty() &&
      std::find(o.variants.begin(), o.variants.end(), UlyssesVariant::pipelined) == o.variants.end())
    throw Error("--chunks, --row-chunks: the chunks of the pipelined variant, which --variants leaves out; expected --variants with pipelined, or no chunks");
  // Named outright, nccl with row chunks is refused; among every version (no --a2a) nccl runs head chunks only.
  if (!o.row_chunks.empty() && o.row_chunks != std::vector<int>{1} &&
      std::find(o.a2a.begin(), o.a2a.end(), A2aVersion::nccl) != o.a2a.end())
    throw Error("--row-chunks: the nccl all-to-all's equal slots are cut by heads only; expected --row-chunks 1 "
                "or --a2a without nccl");
  if (o.check_rows < 0) throw Error(fmt::format("--check-rows: expected >= 0, got {}", o.check_rows));
  for (int r : o.paced_rows)
    if (r < 1) throw Error(fmt::format("--paced-rows: expected rows >= 1, got {}", r));
  if (o.kernel != AttentionKernel::mma_sync && o.kernel != AttentionKernel::wgmma_pingpong)
    throw Error(fmt::format("--kernel {}: not a kernel of the fused attention; expected mma or wgmma", to_string(o.kernel)));
  // Every store path asked for runs in one of the fused variants asked for,
  // with one of the flag timings asked for (coupled has its own timing):
  // else the sweep would leave it out without a word.
  const auto flags = o.flags.empty() ? std::vector{Completion::at_exit} : o.flags;
  const auto variants = o.variants.empty() ? std::vector{UlyssesVariant::fused, UlyssesVariant::coupled} : o.variants;
  for (StorePath st : o.stores) {
    bool runs = false;
    std::vector<std::string> why;  // each reason once
    for (UlyssesVariant v : variants)
      for (Completion ft : flags) {
        if (!is_fused(v)) continue;
        const auto e = ulysses_combination_error(st, v, ft, o.kernel);
        runs = runs || !e;
        if (e && std::find(why.begin(), why.end(), *e) == why.end()) why.push_back(*e);
      }
    if (why.empty() && !runs) why.push_back("no fused or coupled variant asked for (--variants)");
    if (!runs)
      throw Error(fmt::format("--stores {} runs with none of the variants and flag timings asked for (kernel {}): {}; expected a variant that uses these stores",
                              to_string(st), to_string(o.kernel), fmt::join(why, "; ")));
  }
  if (o.profile.empty()) o.profile = default_ulysses_profile(o.world.backend, o.world.placement);
  if (o.profile != "none") {
    (void)load_profile(o.profile);  // fails early, naming the file
    if (o.local_profile.empty()) o.local_profile = kDefaultLocalProfile;
    (void)load_local_profile(o.local_profile);
  }
}

UlyssesFloorRate floor_rate_on_world(World& w, const std::string& command) {
  UlyssesFloorRate f;
  std::string error;
  if (w.leader()) {
    try {
      f = ulysses_floor_probe(ulysses_floor_transport(w.backend(), w.placement()), w.device_of(w.local_ranks().front()));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (w.max_over_ranks(error.empty() ? 0.0 : 1.0) != 0)
    throw Error(error.empty() ? command + " --floor-probe: the probe failed on rank 0 (its message says why); expected a probe that completes on every rank"
                              : command + " --floor-probe: " + error);
  f.R_Bps = w.max_over_ranks(f.R_Bps);
  f.probe_seconds = w.max_over_ranks(f.probe_seconds);
  if (!w.leader()) f.source = "probe";
  return f;
}

UlyssesBenchReport run_ulysses_bench(UlyssesBenchOptions o) {
  validate_ulysses_options(o);
  const int gpus = cuda_device_count();
  if (gpus == 0) throw Error("ulysses: no CUDA GPU visible; expected one GPU (emulated) or one per rank (peer, nccl)");
  if (o.world.ranks < 1) o.world.ranks = gpus;
  validate_ulysses_options(o);
  std::optional<Profile> profile, local;
  if (o.profile != "none") {
    profile = load_profile(o.profile);
    local = load_local_profile(o.local_profile);
  }

  const auto variants =
      o.variants.empty() ? std::vector{UlyssesVariant::attention_only, UlyssesVariant::sequential,
                                       UlyssesVariant::pipelined, UlyssesVariant::fused, UlyssesVariant::coupled}
                         : o.variants;
  // By default the two whole-tile paths and the fused default (paced-warp on
  // the wgmma kernel, paced on the mma kernel).
  const auto stores = o.stores.empty() ? std::vector{StorePath::vector16, StorePath::bulk,
                                                     default_store_path(o.kernel, UlyssesVariant::fused)}
                                       : o.stores;
  const auto orders = o.orders.empty() ? std::vector{TileOrder::linear, TileOrder::rotated} : o.orders;
  // At exit: the best or as good on every path measured (docs/perf-log.md, f8).
  const auto flag_timings = o.flags.empty() ? std::vector{Completion::at_exit} : o.flags;
  const auto a2as = o.a2a.empty() ? available_versions(o.world.backend) : o.a2a;
  // (head chunks, row chunks) pairs: given, or the sweep of each S (row chunks depend on S).
  auto pipeline_pairs = [&](int64_t S, int64_t block_m, A2aVersion a) {
    std::vector<std::pair<int, int>> out;
    if (o.chunks.empty() && o.row_chunks.empty()) {
      out = ulysses_pipeline_sweep(o.heads / o.world.ranks, S, block_m);
    } else {
      for (int h : o.chunks.empty() ? std::vector<int>{1} : o.chunks)
        for (int n : o.row_chunks.empty() ? std::vector<int>{1} : o.row_chunks) out.emplace_back(h, n);
    }
    if (a == A2aVersion::nccl)  // equal slots cut by heads only
      std::erase_if(out, [](const std::pair<int, int>& p) { return p.second != 1; });
    return out;
  };

  auto world = World::create(o.world);
  World& w = *world;
  UlyssesBenchReport rep;
  rep.leader = w.leader();
  rep.world = w.describe();
  rep.profile = profile ? profile->name : "none";
  rep.local_profile = local ? local->name : "none";
  rep.device = device_info(w.device_of(w.local_ranks().front()));
  if (o.floor_probe) {
    rep.floor = floor_rate_on_world(w, "ulysses");
  } else if (profile) {
    UlyssesFloorRate f;
    f.R_Bps = profile->R_Bps, f.source = "profile", f.profile = profile->name, f.transport = profile->transport;
    rep.floor = f;
  }

  const int64_t max_S = *std::max_element(o.seqs.begin(), o.seqs.end());
  UlyssesAttention ua(w, o.batch, o.heads, o.head_dim, max_S, o.kernel);
  rep.kernel = to_string(o.kernel);
  rep.tiles_concurrent = ua.concurrent_tiles_per_gpu();
  rep.block_m = ua.block_m();
  std::string timeline;  // o.timeline's CSV, written once every S has run

  for (int64_t S : o.seqs) {
    ua.set_sequence(S);
    ua.fill_inputs(o.seed);
    UlyssesBenchSummary sum;
    sum.S = S;
    auto base_row = [&](UlyssesVariant v) {
      UlyssesBenchRow r;
      r.variant = to_string(v);
      r.placement = to_string(w.placement());
      r.backend = to_string(w.backend());
      r.P = w.size();
      r.B = o.batch, r.S = S, r.H = o.heads, r.D = o.head_dim;
      return r;
    };
    // Every configuration is checked and run once as it is registered, then
    // all of them are timed together, interleaved, each right after an
    // attention-only run when that is among them (timing.hpp), so that the
    // GPU's clock settling under load reaches every variant alike.
    std::vector<UlyssesRun> runs;  // runs[i] is row first_row + i
    std::vector<double> once_s;
    const size_t first_row = rep.rows.size();
    auto measure = [&](const UlyssesRun& run, UlyssesBenchRow row) {
      if (o.check && run.variant != UlyssesVariant::attention_only) {
        const std::string bad = ua.check_against_local(run);
        if (!bad.empty()) throw Error(fmt::format("ulysses --check at S = {}: {}; expected the output to match the CPU reference", S, bad));
        row.check = "ok";
      }
      // One untimed run first (the check above is one): a configuration's first run at this S pays
      // one-off costs (a pipelined send plan, the lazy loading of a kernel on its first launch,
      // NCCL's first collective) that must not reach the enqueue time or the host-clock run below.
      if (!(o.check && run.variant != UlyssesVariant::attention_only)) ua.run(run);
      {
        // The host's time to enqueue one run, from an idle GPU: where it
        // nears the run's time, back-to-back runs can wait for the host.
        w.fork();
        const auto t0 = std::chrono::steady_clock::now();
        ua.enqueue(run);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        w.join();
        w.barrier();
        ua.check_receivers();
        row.enqueue_us = w.max_over_ranks(s) * 1e6;
      }
      // One run on the host clock sizes the rounds to the time budget.
      const auto t0 = std::chrono::steady_clock::now();
      ua.run(run);
      // Every rank must run the same number of iterations (flag epochs and
      // NCCL collectives count them), so the slowest rank's time decides.
      once_s.push_back(
          w.max_over_ranks(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
      runs.push_back(run);
      rep.rows.push_back(row);
      return rep.rows.size() - 1;
    };

    std::vector<size_t> fused_rows, seq_rows, coupled_rows, pipe_rows;
    std::optional<size_t> att_row;
    for (UlyssesVariant v : variants) {
      UlyssesRun run{v};
      run.timeout_s = o.timeout_s;
      if (v == UlyssesVariant::attention_only) {
        const size_t i = measure(run, base_row(v));
        att_row = i;
        if (o.check && o.check_rows > 0) {
          // The local results through the sequential path, sampled against fp64.
          UlyssesRun seq{UlyssesVariant::sequential};
          seq.a2a = a2as.front();
          ua.run(seq);
          sum.rel_err = w.max_over_ranks(ua.sampled_rel_error(o.seed, o.check_rows, uint64_t(S)));
          if (!(sum.rel_err <= 1e-2))
            throw Error(fmt::format("ulysses --check at S = {}: relative error {:.3g} against the fp64 reference "
                                    "exceeds 1e-2; expected at most 1e-2",
                                    S, sum.rel_err));
          rep.rows[i].check = "fp64";
        }
      } else if (v == UlyssesVariant::sequential) {
        for (A2aVersion a : a2as) {
          run.a2a = a;
          auto row = base_row(v);
          row.a2a = to_string(a);
          seq_rows.push_back(measure(run, row));
        }
      } else if (v == UlyssesVariant::pipelined) {
        for (A2aVersion a : a2as)
          for (const auto& [h, n] : pipeline_pairs(S, ua.block_m(), a)) {
            run.a2a = a, run.chunks = h, run.row_chunks = n, run.graph = o.pipeline_graph;
            auto row = base_row(v);
            row.a2a = to_string(a), row.chunks = h;
            row.row_chunks = int(ulysses_row_chunks(S, n, ua.block_m()).size());
            row.graph = o.pipeline_graph && (w.backend() != Backend::peer || w.size() == 1);
            pipe_rows.push_back(measure(run, row));
          }
      } else {
        for (StorePath s : stores)
          for (TileOrder ord : (v == UlyssesVariant::coupled ? std::vector{TileOrder::rotated} : orders))
            for (Completion ft : (v == UlyssesVariant::coupled ? std::vector{Completion::eager} : flag_timings)) {
              // The paced paths have no coupled form and fewer flag timings.
              if (ulysses_combination_error(s, v, ft, o.kernel)) continue;
              const std::vector<int> slices =
                  !is_paced(s) ? std::vector<int>{0}
                  : o.paced_rows.empty()    ? std::vector<int>{kDefaultPacedRows}
                                            : o.paced_rows;
              for (int rows : slices) {
                run.store = s, run.order = ord, run.flags = ft, run.paced_rows = rows;
                auto row = base_row(v);
                row.store = to_string(s), row.order = to_string(ord), row.paced_rows = rows;
                row.flags = v == UlyssesVariant::coupled ? "coupled" : to_string(ft);
                const size_t i = measure(run, row);
                (v == UlyssesVariant::fused ? fused_rows : coupled_rows).push_back(i);
              }
            }
      }
    }
    // The rounds: as many as fit max_seconds per configuration (at least 3,
    // at most iters), every configuration once per round.
    // With attention-only among them, each other configuration runs right
    // after one of its runs and is paired with it (timing.hpp): a round then
    // also holds one attention-only run per other configuration.
    double round_s = 0;
    for (double x : once_s) round_s += x;
    if (att_row && runs.size() > 1)
      round_s += double(o.settled_pairs ? 2 * runs.size() - 3 : runs.size() - 2) * once_s[*att_row - first_row];
    const int rounds =
        std::clamp(int(o.max_seconds_per_point * double(runs.size()) / std::max(round_s, 1e-6)), std::min(3, o.iters),
                   o.iters);
    std::vector<std::function<void()>> bodies;
    for (const UlyssesRun& run : runs) bodies.push_back([&ua, &run] { ua.enqueue(run); });
    PairedTimes timed;
    if (att_row) {
      timed = paired_after_base_us(w, o.warmup, rounds, *att_row - first_row, bodies, o.settled_pairs);
    } else {
      timed = interleaved_us(w, o.warmup, rounds, bodies);
    }
    if (!o.timeline.empty()) append_timeline(timeline, S, timed, rep.rows, first_row);
    const auto& times = timed.t;
    ua.check_receivers();
    for (size_t i = 0; i < runs.size(); ++i) {
      UlyssesBenchRow& row = rep.rows[first_row + i];
      row.iters = int(times[i].size());  // attention-only: one run per other configuration a round
      row.time_us = median_value(times[i]);
      row.time_min_us = *std::min_element(times[i].begin(), times[i].end());
      row.time_max_us = *std::max_element(times[i].begin(), times[i].end());
      if (row.enqueue_us > 0.5 * row.time_us)
        rep.notes.push_back(fmt::format("S = {}, {}: enqueuing a run takes the host {:.0f} us of its {:.0f} us: the "
                                        "timing may include waits for the host",
                                        S, config_label(row), row.enqueue_us, row.time_us));
    }
    if (!o.dump_dir.empty() && S == o.seqs.front()) {
      // The first fused configuration the sweep runs (store paths, then flag
      // timings, in the order given; validation saw that one runs): the dump
      // checks the configuration the command was given.
      UlyssesRun run{UlyssesVariant::fused};
      run.order = orders.front();
      bool found = false;
      for (StorePath st : stores)
        for (Completion ft : flag_timings)
          if (!found && !ulysses_combination_error(st, UlyssesVariant::fused, ft, o.kernel)) {
            run.store = st, run.flags = ft;
            found = true;
          }
      run.timeout_s = o.timeout_s;
      if (!o.paced_rows.empty()) run.paced_rows = o.paced_rows.front();
      ua.poison_outputs();
      ua.run(run);
      ua.dump_npy(o.dump_dir, o.seed);
    }
    // Per round, a configuration against the attention-only run just before it.
    auto paired = [&](size_t row) { return paired_residuals(times[row - first_row], timed.before[row - first_row]); };
    if (att_row)
      for (size_t i = first_row; i < rep.rows.size(); ++i)
        if (i != *att_row) rep.rows[i].residual_paired = median_value(paired(i));
    // The best configuration of a variant: the least paired residual where
    // the runs are paired, else the least median time (paired_stats.hpp).
    auto best = [&](const std::vector<size_t>& rows) {
      return least_by(rows, [&](size_t i) { return att_row ? *rep.rows[i].residual_paired : rep.rows[i].time_us; });
    };
    if (att_row) sum.attention_only_us = rep.rows[*att_row].time_us;
    if (auto b = best(seq_rows)) {
      sum.sequential_us = rep.rows[*b].time_us;
      sum.sequential_a2a = rep.rows[*b].a2a;
    }
    if (auto b = best(pipe_rows)) {
      sum.pipelined_us = rep.rows[*b].time_us;
      sum.pipelined_a2a = rep.rows[*b].a2a;
      sum.pipelined_chunks = rep.rows[*b].chunks;
      sum.pipelined_row_chunks = rep.rows[*b].row_chunks;
      if (att_row) sum.residual_pipelined_rounds = paired(*b);
    }
    sum.sequential_configs = int(seq_rows.size());
    sum.pipelined_configs = int(pipe_rows.size());
    sum.fused_configs = int(fused_rows.size());
    if (auto b = best(fused_rows)) {
      sum.fused_us = rep.rows[*b].time_us;
      const auto& r = rep.rows[*b];
      sum.fused_config = r.store + (r.paced_rows > 0 ? fmt::format("({})", r.paced_rows) : "") + "/" + r.order + "/" +
                         r.flags;
      if (att_row) sum.residual_fused_rounds = paired(*b);
    }
    if (auto b = best(coupled_rows)) {
      sum.coupled_us = rep.rows[*b].time_us;
      if (att_row) sum.residual_coupled_rounds = paired(*b);
    }

    // The floor and the model, from the attention-only time and the kernel's tile schedule.
    std::optional<UlyssesKernelShape> ks;
    if (sum.attention_only_us > 0) {
      ks = ulysses_kernel_shape(ua.layout().shape(), w.backend() == Backend::emulated, w.local_ranks().front(),
                                ua.block_m(), ua.concurrent_tiles_per_gpu(), sum.attention_only_us);
      if (ks->tiles != ua.tiles_per_gpu())
        throw Error(fmt::format("ulysses: the prediction counts {} tiles, the kernel runs {}; expected the same count (a bug: please report it)", ks->tiles,
                                ua.tiles_per_gpu()));
      sum.payload_bytes = ks->payload_bytes;
      // No schedule beats the attention alone, nor sends the payload faster than the path drains.
      if (rep.floor && rep.floor->R_Bps > 0)
        sum.floor_us = std::max(sum.attention_only_us, ks->payload_bytes / rep.floor->R_Bps * 1e6);
    }
    if (profile && ks) {
      // The attention-only time contains a store into this GPU's memory, not into the profiled path.
      const UlyssesPrediction pr = predict_ulysses(*profile, *ks, &*local);
      sum.predicted_fused_us = pr.fused_us;
      sum.predicted_sequential_us = pr.sequential_us;
      for (size_t i : fused_rows) rep.rows[i].predicted_time_us = pr.fused_us;
      for (size_t i : seq_rows) rep.rows[i].predicted_time_us = pr.sequential_us;
    }
    rep.summary.push_back(sum);
  }
  if (!o.timeline.empty() && rep.leader) detail::write_file_replacing(o.timeline, timeline, "--timeline");
  return rep;
}

}  // namespace xstage
