#include "xstage/core/units.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "xstage/core/error.hpp"

namespace xstage {
namespace {

struct Suffix {
  std::string_view text;
  double scale;
};

// The text as it may be printed on one line: control bytes as \xNN.
std::string printable(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  return out;
}

// Splits "1.5ms" into 1.5 and "ms"; throws on text that is no number.
double leading_number(std::string_view text, std::string_view what, std::string_view expected,
                      std::string* rest) {
  std::string s(text);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t start = 0;
  while (start < s.size() && std::isspace(static_cast<unsigned char>(s[start]))) ++start;
  s = s.substr(start);
  if (s.empty()) throw Error(fmt::format("{}: empty value; expected {}", what, expected));
  // strtod stops at a NUL byte; text after one must still count as the unit,
  // so that "1MiB\0garbage" is rejected rather than read as 1 MiB.
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str())
    throw Error(fmt::format("{}: '{}' is not a number; expected {}", what, printable(text), expected));
  *rest = s.substr(static_cast<size_t>(end - s.c_str()));
  if (!std::isfinite(v)) throw Error(fmt::format("{}: '{}' is not finite; expected a finite number", what, printable(text)));
  return v;
}

double apply_suffix(double v, const std::string& rest, const Suffix* table, size_t n,
                    std::string_view text, std::string_view what, std::string_view expected) {
  for (size_t i = 0; i < n; ++i)
    if (rest == table[i].text) return v * table[i].scale;
  throw Error(fmt::format("{}: unknown unit '{}' in '{}'; expected {}", what, printable(rest), printable(text),
                          expected));
}

}  // namespace

double parse_size_bytes(std::string_view text, std::string_view what, bool allow_zero) {
  static constexpr std::string_view expected =
      "a size such as 4096, 4e6, 64KiB, 2MiB, 1.5MB or 2M (plain numbers are bytes)";
  static const Suffix table[] = {
      {"", 1.0},          {"B", 1.0},           {"KiB", 1024.0},   {"MiB", 1048576.0},
      {"GiB", 1073741824.0}, {"KB", 1e3},        {"MB", 1e6},       {"GB", 1e9},
      {"kB", 1e3},        {"K", 1024.0},        {"k", 1024.0},     {"M", 1048576.0},
      {"G", 1073741824.0}};
  std::string rest;
  double v = leading_number(text, what, expected, &rest);
  v = apply_suffix(v, rest, table, std::size(table), text, what, expected);
  if (!std::isfinite(v)) throw Error(fmt::format("{}: '{}' is too large; expected a number a double holds (below 1.8e308)", what, text));
  if (v < 0) throw Error(fmt::format("{}: '{}' is negative; expected a positive size", what, text));
  if (v == 0 && !allow_zero)
    throw Error(fmt::format("{}: '{}' is zero; expected a positive size", what, text));
  // No store moves a fraction of a byte: 1e-300 would be simulated as a
  // burst of nothing.
  if (v > 0 && v < 1) throw Error(fmt::format("{}: '{}' is less than one byte; expected at least 1 byte", what, text));
  return v;
}

double parse_time_ns(std::string_view text, std::string_view what, bool allow_zero) {
  static constexpr std::string_view expected =
      "a time such as 250, 250ns, 20us, 1.5ms or 2s (plain numbers are ns)";
  static const Suffix table[] = {{"", 1.0},      {"ns", 1.0},   {"us", 1e3}, {"\xC2\xB5s", 1e3},
                                 {"\xCE\xBCs", 1e3}, {"ms", 1e6}, {"s", 1e9}};
  std::string rest;
  double v = leading_number(text, what, expected, &rest);
  v = apply_suffix(v, rest, table, std::size(table), text, what, expected);
  if (!std::isfinite(v)) throw Error(fmt::format("{}: '{}' is too large; expected a number a double holds (below 1.8e308)", what, text));
  if (v < 0) throw Error(fmt::format("{}: '{}' is negative; expected a time >= 0", what, text));
  if (v == 0 && !allow_zero)
    throw Error(fmt::format("{}: '{}' is zero; expected a positive time", what, text));
  return v;
}

std::string format_bytes(double b) {
  if (!std::isfinite(b)) return "inf";
  const double a = std::fabs(b);
  if (a >= 1073741824.0) return fmt::format("{:.2f} GiB", b / 1073741824.0);
  if (a >= 1048576.0) return fmt::format("{:.2f} MiB", b / 1048576.0);
  if (a >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{:.0f} B", b);
}

std::string format_ns(double ns) {
  if (!std::isfinite(ns)) return "inf";
  const double a = std::fabs(ns);
  if (a >= 1e9) return fmt::format("{:.3f} s", ns / 1e9);
  if (a >= 1e6) return fmt::format("{:.3f} ms", ns / 1e6);
  if (a >= 1e3) return fmt::format("{:.2f} us", ns / 1e3);
  return fmt::format("{:.0f} ns", ns);
}

std::string format_rate(double bps) {
  if (!std::isfinite(bps)) return "inf";
  return fmt::format("{:.1f} GB/s", bps / 1e9);
}

}  // namespace xstage
