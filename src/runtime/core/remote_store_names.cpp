// Names of the remote-store layer's choices (include/xstage/comm/remote_store.hpp).
#include "xstage/comm/remote_store.hpp"

#include <fmt/format.h>

#include "xstage/core/error.hpp"

namespace xstage {

std::string to_string(StorePath s) {
  switch (s) {
    case StorePath::vector16: return "vector16";
    case StorePath::vector16_wt: return "vector16-wt";
    case StorePath::vector16_cs: return "vector16-cs";
    case StorePath::bulk: return "bulk";
    case StorePath::paced: return "paced";
    case StorePath::paced_bulk: return "paced-bulk";
    case StorePath::paced_warp: return "paced-warp";
  }
  return "?";
}

std::string to_string(Completion c) {
  switch (c) {
    case Completion::lagged: return "lagged";
    case Completion::eager: return "eager";
    case Completion::at_exit: return "at-exit";
    case Completion::coupled: return "coupled";
  }
  return "?";
}

bool is_paced(StorePath s) { return s == StorePath::paced || s == StorePath::paced_bulk || s == StorePath::paced_warp; }

StorePath parse_store_path(std::string_view t) {
  for (auto s : {StorePath::vector16, StorePath::vector16_wt, StorePath::vector16_cs, StorePath::bulk,
                 StorePath::paced, StorePath::paced_bulk, StorePath::paced_warp})
    if (t == to_string(s)) return s;
  throw Error(fmt::format("store path '{}': expected vector16 (16-byte stores from registers), vector16-wt, "
                          "vector16-cs (the same, write-through or streaming), bulk (TMA bulk copies from shared "
                          "memory), paced (16-byte stores spread over the next tile's mainloop), paced-bulk or "
                          "paced-warp (the same slices sent by a producer warp, TMA bulk copies or 16-byte stores)",
                          t));
}

Completion parse_completion(std::string_view t) {
  for (auto c : {Completion::lagged, Completion::eager, Completion::at_exit, Completion::coupled})
    if (t == to_string(c)) return c;
  throw Error(fmt::format("flag timing '{}': expected lagged, eager, at-exit or coupled", t));
}

}  // namespace xstage
