#include <fmt/format.h>

#include "xstage/core/error.hpp"
#include "xstage/probe/probe.hpp"

namespace xstage {

const char* to_string(Transport t) {
  switch (t) {
    case Transport::local: return "local";
    case Transport::host: return "host";
    case Transport::peer: return "peer";
  }
  return "?";
}
const char* to_string(StoreKind s) {
  switch (s) {
    case StoreKind::v4: return "v4";
    case StoreKind::b64: return "b64";
    case StoreKind::b32: return "b32";
    case StoreKind::bulk: return "bulk";
  }
  return "?";
}
const char* to_string(GapKind g) {
  switch (g) {
    case GapKind::spin: return "spin";
    case GapKind::fma: return "fma";
    case GapKind::mma: return "mma";
  }
  return "?";
}
const char* to_string(BurstCompletion c) {
  switch (c) {
    case BurstCompletion::none: return "none";
    case BurstCompletion::fence: return "fence";
    case BurstCompletion::flag: return "flag";
  }
  return "?";
}

namespace {
template <typename E, size_t N>
E parse_choice(const std::string& s, const char* what, const E (&all)[N]) {
  std::string choices;
  for (E e : all) {
    if (s == to_string(e)) return e;
    choices += (choices.empty() ? "" : ", ") + std::string(to_string(e));
  }
  throw Error(fmt::format("{}: unknown value '{}'; expected one of {}", what, s, choices));
}
}  // namespace

Transport parse_transport(const std::string& s) {
  static const Transport all[] = {Transport::local, Transport::host, Transport::peer};
  return parse_choice(s, "--transport", all);
}
StoreKind parse_store_kind(const std::string& s) {
  static const StoreKind all[] = {StoreKind::v4, StoreKind::b64, StoreKind::b32, StoreKind::bulk};
  return parse_choice(s, "--store", all);
}
GapKind parse_gap_kind(const std::string& s) {
  static const GapKind all[] = {GapKind::spin, GapKind::fma, GapKind::mma};
  return parse_choice(s, "--gap-kind", all);
}
BurstCompletion parse_burst_completion(const std::string& s) {
  static const BurstCompletion all[] = {BurstCompletion::none, BurstCompletion::fence, BurstCompletion::flag};
  return parse_choice(s, "--completion", all);
}

}  // namespace xstage
