// The MoE layer's names: known shapes, schedules and variants (include/xstage/moe/moe_layer.hpp).
#include <charconv>

#include <fmt/format.h>

#include "xstage/core/error.hpp"
#include "xstage/moe/moe_layer.hpp"

namespace xstage {

const std::vector<MoeShape>& moe_known_shapes() {
  static const std::vector<MoeShape> shapes = {
      {"deepseek-v3", 7168, 2048, 256, 8}, {"deepseek-v4-flash", 4096, 2048, 256, 6},
      {"qwen3-235b", 4096, 1536, 128, 8},  {"qwen3-30b-a3b", 2048, 768, 128, 8},
      {"mixtral-8x7b", 4096, 14336, 8, 2}, {"hidream-i1", 2560, 6912, 4, 2},
  };
  return shapes;
}

namespace {

std::string known_names() {
  std::string names;
  for (const MoeShape& s : moe_known_shapes()) names += (names.empty() ? "" : ", ") + s.name;
  return names;
}

// A whole number >= 1 spelled with digits only.
bool parse_positive(std::string_view t, int& out) {
  if (t.empty()) return false;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
  return ec == std::errc() && end == t.data() + t.size() && out >= 1;
}

}  // namespace

std::optional<MoeShape> find_known_moe_shape(std::string_view name) {
  // moe-gemm's full name of Qwen3-235B is the same layer.
  if (name == "qwen3-235b-a22b") name = "qwen3-235b";
  for (const MoeShape& s : moe_known_shapes())
    if (name == s.name) return s;
  return std::nullopt;
}

MoeShape parse_moe_shape(std::string_view text) {
  if (const auto known = find_known_moe_shape(text)) return *known;
  MoeShape s;
  s.name = "custom";
  int* fields[4] = {&s.hidden, &s.inter, &s.experts, &s.topk};
  std::string_view rest = text;
  for (int i = 0; i < 4; ++i) {
    const size_t slash = rest.find('/');
    const std::string_view part = i < 3 ? rest.substr(0, slash) : rest;
    if ((i < 3 && slash == std::string_view::npos) || !parse_positive(part, *fields[i]))
      throw Error(
          fmt::format("MoE shape '{}': expected one of {} or hidden/inter/experts/topk (four whole numbers "
                      ">= 1, e.g. 4096/1536/128/8)",
                      text, known_names()));
    if (i < 3) rest = rest.substr(slash + 1);
  }
  return s;
}

std::string to_string(MoeSchedule s) {
  switch (s) {
    case MoeSchedule::expert_wave: return "expert-wave";
    case MoeSchedule::interleaved: return "interleaved";
    case MoeSchedule::model_guided: return "model-guided";
  }
  return "?";
}

MoeSchedule parse_moe_schedule(std::string_view t) {
  for (auto s : {MoeSchedule::expert_wave, MoeSchedule::interleaved, MoeSchedule::model_guided})
    if (t == to_string(s)) return s;
  throw Error(fmt::format("MoE schedule '{}': expected expert-wave, interleaved or model-guided", t));
}

std::string to_string(MoeLayerVariant v) {
  switch (v) {
    case MoeLayerVariant::fused: return "fused";
    case MoeLayerVariant::unfused: return "unfused";
    case MoeLayerVariant::compute_only: return "compute-only";
  }
  return "?";
}

MoeLayerVariant parse_moe_layer_variant(std::string_view t) {
  for (auto v : {MoeLayerVariant::fused, MoeLayerVariant::unfused, MoeLayerVariant::compute_only})
    if (t == to_string(v)) return v;
  throw Error(fmt::format("MoE layer variant '{}': expected fused, unfused or compute-only", t));
}

}  // namespace xstage
