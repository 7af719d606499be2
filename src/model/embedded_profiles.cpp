#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "xstage/core/error.hpp"
#include "xstage/model/profile.hpp"

namespace xstage {
namespace detail {
extern const std::vector<std::string_view> kEmbeddedProfileJson;  // generated from profiles/*.json
}

const std::vector<Profile>& embedded_profiles() {
  static const std::vector<Profile> all = [] {
    std::vector<Profile> v;
    for (std::string_view text : detail::kEmbeddedProfileJson)
      v.push_back(profile_from_json(nlohmann::json::parse(text), "embedded profile"));
    return v;
  }();
  return all;
}

const Profile* find_embedded_profile(const std::string& name) {
  for (const auto& p : embedded_profiles())
    if (p.name == name) return &p;
  return nullptr;
}

// The default is the H200 host-mapped PCIe profile: the one path every H200
// machine has, and the one the single-GPU probe measures.
const Profile& default_profile() {
  const Profile* p = find_embedded_profile("h200-host-pcie");
  if (!p) throw Error("embedded profile 'h200-host-pcie' is missing from this build; expected it compiled in (profiles/)");
  return *p;
}

}  // namespace xstage
