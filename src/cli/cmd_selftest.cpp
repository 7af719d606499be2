// xstage selftest: failure paths exercised on purpose.
//   flag-timeout  a kernel waits on a flag nobody sets; the wait times out
//                 and records rank, flag, expected and seen values, which
//                 the host reports. Exits non-zero by design.
#include "commands.hpp"
#include "harness/comm/selftest.hpp"
#include "xstage/core/units.hpp"

namespace xstage::cli {

namespace {
struct FlagTimeoutArgs {
  std::string timeout = "50ms";
  int rank = 0, flag = 3;
};
}  // namespace

void add_selftest_command(CLI::App& app) {
  auto* sub = app.add_subcommand("selftest", "Exercise failure paths on purpose (needs a GPU)");
  sub->require_subcommand(1);
  auto a = std::make_shared<FlagTimeoutArgs>();
  auto* ft = sub->add_subcommand("flag-timeout",
                                 "Wait on a flag nobody sets: the wait times out, the host reports the "
                                 "rank/flag/expected/seen it recorded, and the command exits non-zero");
  ft->add_option("--timeout", a->timeout, "How long the kernel waits: 50ms, 200us ...")->capture_default_str();
  ft->add_option("--rank", a->rank, "Rank the waiting kernel reports")->capture_default_str();
  ft->add_option("--flag", a->flag, "Flag index it waits on")->capture_default_str();
  ft->callback([a] {
    const double ns = parse_time_ns(a->timeout, "--timeout", false);
    selftest_flag_timeout(static_cast<uint64_t>(ns), a->rank, a->flag);
  });
}

}  // namespace xstage::cli
