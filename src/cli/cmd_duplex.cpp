// xstage duplex: one path's two directions timed alone and at once (reads of
// one far buffer, stores into another), the rates the MoE model's duplex
// capacity comes from (xstage/probe/duplex.hpp). Here the options and the printing.
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "util/output_file.hpp"
#include "util/replace_file.hpp"
#include "xstage/core/build_info.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"
#include "xstage/core/units.hpp"
#include "xstage/probe/duplex.hpp"

namespace xstage::cli {

namespace {

struct DuplexArgs {
  std::string path = "host";
  int device = 0;
  std::string bytes = "256MiB";
  int blocks_per_sm = 2;
  int read_warps = 4;
  int loads_in_flight = 4;
  int reps = 5;
  std::string output;
  OutputFlags out;
};

double gbps(double Bps) { return Bps * 1e-9; }

void run_duplex(const DuplexArgs& a) {
  DuplexConfig c;
  c.path = parse_duplex_path(a.path);
  c.device = a.device;
  const double b = parse_size_bytes(a.bytes, "--bytes");
  if (!(b >= 1 << 20) || b > double(64ull << 30))
    throw Error(fmt::format("--bytes: {}; expected a multiple of 16 between 1 MiB and 64 GiB", a.bytes));
  c.bytes = uint64_t(b);
  c.blocks_per_sm = a.blocks_per_sm;
  c.read_warps = a.read_warps;
  c.loads_in_flight = a.loads_in_flight;
  c.reps = a.reps;
  validate(c);
  std::unique_ptr<detail::OutputFile> file;
  if (!a.output.empty()) file = std::make_unique<detail::OutputFile>(a.output, "-o");
  if (cuda_device_count() == 0) throw Error("duplex: no CUDA GPU is visible to this process; expected a machine with a GPU (CUDA_VISIBLE_DEVICES not empty)");
  const DeviceInfo dev = device_info(a.device);
  const DuplexRates r = measure_duplex(c);
  const nlohmann::json doc{{"command", command_line()},
                           {"commit", build_commit()},
                           {"date", utc_now_iso()},
                           {"device", dev.name},
                           {"driver", dev.driver},
                           {"sm_clock_mhz", r.sm_clock_mhz},
                           {"path", to_string(c.path)},
                           {"bytes", c.bytes},
                           {"blocks", r.blocks},
                           {"read_warps", c.read_warps},
                           {"loads_in_flight", c.loads_in_flight},
                           {"store_warps", kDuplexWarpsPerBlock - c.read_warps},
                           {"reps", c.reps},
                           {"read_alone_Bps", r.read_alone_Bps},
                           {"store_alone_Bps", r.store_alone_Bps},
                           {"read_both_Bps", r.read_both_Bps},
                           {"store_both_Bps", r.store_both_Bps},
                           {"both_Bps", r.both_Bps},
                           {"overlap", r.overlap},
                           {"store_mismatches", r.store_mismatches},
                           {"checked_vectors", r.checked_vectors}};
  if (r.store_mismatches > 0)  // a record of a probe whose stores did not land is not written
    throw Error(fmt::format("duplex {} path: {} of {} stored 16-byte vectors do not hold what the kernel stored; expected every vector to arrive intact",
                            to_string(c.path), r.store_mismatches, r.checked_vectors));
  if (file) {
    file->stream() << doc.dump(1) << "\n";
    file->commit();
  }
  if (a.out.format() == Format::json) {
    std::cout << doc.dump(1) << "\n";
    return;
  }
  Table t({"path", "read_alone_GBps", "store_alone_GBps", "read_both_GBps", "store_both_GBps", "both_GBps", "overlap"});
  t.add({to_string(c.path), fmt::format("{:.2f}", gbps(r.read_alone_Bps)), fmt::format("{:.2f}", gbps(r.store_alone_Bps)),
         fmt::format("{:.2f}", gbps(r.read_both_Bps)), fmt::format("{:.2f}", gbps(r.store_both_Bps)),
         fmt::format("{:.2f}", gbps(r.both_Bps)), fmt::format("{:.3f}", r.overlap)});
  if (a.out.format() == Format::csv) {
    std::cout << t.csv();
    return;
  }
  std::cout << fmt::format("duplex, {} path, device {} ({}), {} each way, {} blocks of {} read + {} store warps, "
                           "{} loads a lane in flight, median of {}; SM clock {:.0f} MHz\n",
                           to_string(c.path), a.device, dev.name, format_bytes(double(c.bytes)), r.blocks,
                           c.read_warps, kDuplexWarpsPerBlock - c.read_warps, c.loads_in_flight, c.reps,
                           r.sm_clock_mhz);
  std::cout << t.text();
  std::cout << fmt::format("both directions at once: {:.2f} GB/s = {:.2f} x the faster alone\n", gbps(r.both_Bps),
                           r.both_Bps / std::max(r.read_alone_Bps, r.store_alone_Bps));
}

}  // namespace

void add_duplex_command(CLI::App& app) {
  auto a = std::make_shared<DuplexArgs>();
  auto* sub = app.add_subcommand(
      "duplex", "Time a path's two directions alone and at once (reads of one far buffer, stores into another)");
  sub->add_option("--path", a->path, "host (pinned host memory), local (the GPU's own) or peer (device + 1's)")
      ->capture_default_str();
  sub->add_option("--device", a->device, "CUDA device that runs the probe")->capture_default_str();
  sub->add_option("--bytes", a->bytes, "Bytes each direction moves")->capture_default_str();
  sub->add_option("--blocks-per-sm", a->blocks_per_sm, "Blocks of 8 warps an SM")->capture_default_str();
  sub->add_option("--read-warps", a->read_warps, "Warps of a block that read; the others store")->capture_default_str();
  sub->add_option("--loads-in-flight", a->loads_in_flight,
                  "16-byte loads a reader lane keeps in flight: 4 (the fused MoE kernel's copy warps) or 8")
      ->capture_default_str();
  sub->add_option("--reps", a->reps, "Repetitions of each measurement (the median is reported)")->capture_default_str();
  sub->add_option("-o,--output", a->output, "Also write the JSON record to FILE");
  add_output_flags(sub, a->out);
  sub->callback([a] { run_duplex(*a); });
}

}  // namespace xstage::cli
