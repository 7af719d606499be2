// xstage a2a: the Ulysses all-to-all baseline, bandwidth against message size
// the nccl-tests way, for every available version and both directions.
#include <chrono>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "harness/comm/a2a_bench.hpp"
#include "util/output_file.hpp"
#include "xstage/comm/a2a.hpp"
#include "xstage/core/build_info.hpp"
#include "xstage/core/error.hpp"
#include "xstage/core/units.hpp"

namespace xstage::cli {

namespace {

struct A2aArgs {
  std::string minbytes = "1M", maxbytes = "64M", backend = "emulated", placement = "device";
  double stepfactor = 2;
  int iters = 20, warmup = 5, ranks = -1;
  int64_t heads = 24, head_dim = 128, batch = 1;
  std::vector<std::string> versions, directions;
  bool check = false;
  uint64_t seed = 1;
  std::string out_file;
  OutputFlags out;
};

// Everything an argument can get wrong, checked before looking for a GPU.
A2aBenchOptions to_options(const A2aArgs& a) {
  A2aBenchOptions o;
  o.world.backend = parse_backend(a.backend);
  o.world.placement = parse_placement(a.placement);
  if (a.ranks != -1 && a.ranks < 1) throw Error(fmt::format("--ranks: expected a whole number >= 1, got {}", a.ranks));
  o.world.ranks = a.ranks;
  o.min_bytes = parse_size_bytes(a.minbytes, "-b/--minbytes");
  o.max_bytes = parse_size_bytes(a.maxbytes, "-e/--maxbytes");
  o.step_factor = a.stepfactor;
  o.iters = a.iters;
  o.warmup = a.warmup;
  o.batch = a.batch;
  o.heads = a.heads;
  o.head_dim = a.head_dim;
  for (const auto& v : a.versions) o.versions.push_back(parse_a2a_version(v));
  for (const auto& d : a.directions) o.directions.push_back(parse_direction(d));
  o.check = a.check;
  o.seed = a.seed;
  validate_a2a_options(o);
  return o;
}

// The rows as --json prints them and as --csv and -o write them: the same
// fields, null (an empty cell) where a row has no value (the shape of the
// device-to-host reference row; check before --check ran).
nlohmann::json rows_json(const std::vector<A2aBenchRow>& rows) {
  const nlohmann::json none;
  auto dim = [&](int64_t v) { return v > 0 ? nlohmann::json(v) : none; };
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows)
    out.push_back({{"version", r.version}, {"direction", r.direction}, {"placement", r.placement},
                   {"backend", r.backend}, {"ranks", r.ranks}, {"B", dim(r.B)}, {"S", dim(r.S)}, {"H", dim(r.H)},
                   {"D", dim(r.D)}, {"bytes", r.bytes}, {"time_us", r.time_us}, {"algbw_GBps", r.algbw_GBps},
                   {"busbw_GBps", r.busbw_GBps}, {"check", r.check == "-" ? none : nlohmann::json(r.check)}});
  return out;
}

std::string rows_csv(const std::vector<A2aBenchRow>& rows) {
  return csv_of({"version", "direction", "placement", "backend", "ranks", "B", "S", "H", "D", "bytes", "time_us",
                 "algbw_GBps", "busbw_GBps", "check"},
                rows_json(rows));
}

void write_csv_file(const std::string& path, const A2aBenchReport& rep, const A2aBenchOptions& o) {
  detail::OutputFile out(path, "-o");
  std::ostream& f = out.stream();
  f << "# tool: xstage a2a\n";
  f << "# device: " << rep.device.name << "\n";
  f << "# driver: " << rep.device.driver << "\n";
  f << "# date: " << utc_now_iso() << "\n";
  f << "# commit: " << build_commit() << "\n";
  f << "# command: " << command_line() << "\n";
  f << "# world: " << rep.world << "\n";
  f << fmt::format("# shape: B = {}, H = {}, D = {}, element = {} bytes (bf16); S = bytes / (B*H*D*element)\n",
                   o.batch, o.heads, o.head_dim, o.elem_bytes);
  f << fmt::format("# timing: median of {} iterations after {} warm-up, CUDA events\n", o.iters, o.warmup);
  f << "# bytes: payload of the whole all-to-all over all ranks; algbw = bytes / time; busbw: docs/design/comm.md\n";
  f << rows_csv(rep.rows);
  out.commit();
}

void run_a2a(const A2aArgs& a) {
  const A2aBenchOptions o = to_options(a);
  if (!a.out_file.empty()) detail::check_output_path(a.out_file, "-o");  // before the GPU work
  const A2aBenchReport rep = run_a2a_bench(o);
  if (!rep.leader) return;  // rank 0 of the nccl backend speaks for all
  if (!a.out_file.empty()) write_csv_file(a.out_file, rep, o);
  switch (a.out.format()) {
    case Format::csv: std::cout << rows_csv(rep.rows); return;
    case Format::json: {
      nlohmann::json j{{"device", rep.device.name}, {"driver", rep.device.driver}, {"world", rep.world},
                       {"commit", build_commit()}, {"rows", rows_json(rep.rows)}};
      std::cout << j.dump(2) << "\n";
      return;
    }
    case Format::table: break;
  }
  std::cout << fmt::format("{} ({}): {}\n", rep.device.name, rep.device.driver, rep.world);
  Table t({"version", "direction", "bytes", "S", "time", "algbw", "busbw", "check"});
  for (const auto& r : rep.rows)
    t.add({r.version, r.direction, format_bytes(r.bytes), r.S ? std::to_string(r.S) : "-", format_ns(r.time_us * 1e3),
           format_rate(r.algbw_GBps * 1e9), format_rate(r.busbw_GBps * 1e9), r.check});
  std::cout << t.text();
  if (!a.out_file.empty()) std::cout << fmt::format("wrote {}\n", a.out_file);
}

}  // namespace

void add_a2a_command(CLI::App& app) {
  auto a = std::make_shared<A2aArgs>();
  auto* sub = app.add_subcommand("a2a", "Ulysses all-to-all baseline: bandwidth against size, each version, "
                                        "both directions");
  sub->add_option("-b,--minbytes", a->minbytes, "Smallest all-to-all payload (all ranks): 1M, 64KiB ...")
      ->capture_default_str();
  sub->add_option("-e,--maxbytes", a->maxbytes, "Largest payload")->capture_default_str();
  sub->add_option("-f,--stepfactor", a->stepfactor, "Size multiplier between steps")->capture_default_str();
  sub->add_option("-n,--iters", a->iters, "Timed iterations per point (the median is reported)")
      ->capture_default_str();
  sub->add_option("-w,--warmup", a->warmup, "Untimed iterations first")->capture_default_str();
  sub->add_option("--backend", a->backend, "emulated (P ranks on one GPU), peer (one GPU per rank), nccl (one "
                                           "process per GPU: xstage launch -n P -- xstage a2a --backend nccl)")
      ->capture_default_str();
  sub->add_option("--ranks", a->ranks, "Ranks P (default: emulated 8, peer every GPU, nccl WORLD_SIZE)");
  sub->add_option("--placement", a->placement, "Destination buffers in device memory or mapped host memory")
      ->capture_default_str();
  sub->add_option("--heads", a->heads, "Attention heads H (a multiple of P)")->capture_default_str();
  sub->add_option("--head-dim", a->head_dim, "Head dimension D")->capture_default_str();
  sub->add_option("--batch", a->batch, "Batch B")->capture_default_str();
  sub->add_option("--versions", a->versions, "Subset of copy-engine,store-kernel,nccl")->delimiter(',');
  sub->add_option("--directions", a->directions, "Subset of seq-to-heads (pre),heads-to-seq (post)")->delimiter(',');
  sub->add_flag("--check", a->check, "Check each version bit-exactly against the CPU reference once per size");
  sub->add_option("--seed", a->seed, "Seed of the --check inputs")->capture_default_str();
  sub->add_option("-o,--output", a->out_file, "Also write the CSV, with '# key: value' provenance lines, to FILE");
  add_output_flags(sub, a->out);
  sub->callback([a] { run_a2a(*a); });
}

}  // namespace xstage::cli
