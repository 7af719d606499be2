#include "csv.hpp"

#include <fmt/format.h>

#include "xstage/error.hpp"

namespace xstage::detail {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

std::vector<std::string> split_csv_line(const std::string& line, const std::string& where) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false, was_quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = was_quoted = true;
    } else if (c == ',') {
      out.push_back(was_quoted ? cur : trim(cur));
      cur.clear();
      was_quoted = false;
    } else {
      cur += c;
    }
  }
  if (quoted) throw Error(fmt::format("{}: unterminated quoted field", where));
  out.push_back(was_quoted ? cur : trim(cur));
  return out;
}

}  // namespace xstage::detail
