#pragma once
// The wgmma attention kernel's key order (MainloopParams::kv_zigzag) for
// every launch this library makes. Internal to src/runtime.
#include <cstdlib>
#include <cstring>

namespace xstage {

// XSTAGE_KV_ORDER=zigzag: every second tile of a CTA walks the keys
// backwards; unset or "forward": every tile forwards.
inline int attention_kv_zigzag() {
  static const int v = [] {
    const char* s = std::getenv("XSTAGE_KV_ORDER");
    return s != nullptr && std::strcmp(s, "zigzag") == 0 ? 1 : 0;
  }();
  return v;
}

}  // namespace xstage
