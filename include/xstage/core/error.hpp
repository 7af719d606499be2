#pragma once
// One exception type for every user-facing failure: what went wrong, where,
// and what was expected. The CLI prints its message on one line and exits 2.
#include <stdexcept>
#include <string>
#include <string_view>

namespace xstage {

// A message as one readable line: a byte that is no printable text (a NUL,
// which would end the C string what() returns, a line break, an escape
// sequence) is written as \xNN, and a message longer than kMaxMessageBytes
// keeps its start and its end (the "; expected ..." part) around a note of
// what was cut, so that a 100 MB cell quoted in an error does not flood the
// terminal.
inline constexpr size_t kMaxMessageBytes = 600;
inline std::string readable_message(std::string_view m) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(std::min(m.size(), 2 * kMaxMessageBytes) + 16);
  const size_t head = kMaxMessageBytes * 2 / 3, tail = kMaxMessageBytes / 4;
  const bool cut = m.size() > kMaxMessageBytes;
  auto put = [&](std::string_view part) {
    for (const char c : part) {
      const auto u = static_cast<unsigned char>(c);
      if (u < 0x20 || u == 0x7f) {
        s += "\\x";
        s += kHex[u >> 4];
        s += kHex[u & 15];
      } else {
        s += c;  // UTF-8 passes as it is
      }
    }
  };
  if (!cut) {
    put(m);
    return s;
  }
  put(m.substr(0, head));
  s += " [... " + std::to_string(m.size() - head - tail) + " bytes cut ...] ";
  put(m.substr(m.size() - tail));
  return s;
}

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(readable_message(what)) {}
};

}  // namespace xstage
