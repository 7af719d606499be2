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

void split_csv_line_into(const std::string& line, const std::string& where, std::vector<std::string>& out) {
  size_t n = 0;
  auto next = [&]() -> std::string& {
    if (n == out.size()) out.emplace_back();
    std::string& f = out[n++];
    f.clear();
    return f;
  };
  auto trim_in_place = [](std::string& f) {
    const size_t b = f.find_last_not_of(" \t\r");
    f.erase(b == std::string::npos ? 0 : b + 1);
    const size_t a = f.find_first_not_of(" \t\r");
    f.erase(0, a == std::string::npos ? f.size() : a);
  };
  std::string* cur = &next();
  bool quoted = false, was_quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        *cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        *cur += c;
      }
    } else if (c == '"') {
      quoted = was_quoted = true;
    } else if (c == ',') {
      if (!was_quoted) trim_in_place(*cur);
      cur = &next();
      was_quoted = false;
    } else {
      *cur += c;
    }
  }
  if (quoted) throw Error(fmt::format("{}: unterminated quoted field", where));
  if (!was_quoted) trim_in_place(*cur);
  out.resize(n);
}

std::vector<std::string> split_csv_line(const std::string& line, const std::string& where) {
  std::vector<std::string> out;
  split_csv_line_into(line, where, out);
  return out;
}

namespace {
constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";

void drop_bom(std::string& line, bool& first) {
  if (first && line.compare(0, kUtf8Bom.size(), kUtf8Bom) == 0) line.erase(0, kUtf8Bom.size());
  first = false;
}
}  // namespace

NextLine lines_of(std::istream& in) {
  return [&in, first = true](std::string& line) mutable {
    if (!std::getline(in, line)) return false;
    drop_bom(line, first);
    return true;
  };
}

NextLine lines_of(std::string_view text) {
  return [text, pos = size_t(0), first = true](std::string& line) mutable {
    if (pos >= text.size()) return false;
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    line.assign(text.substr(pos, end - pos));
    pos = end + 1;
    drop_bom(line, first);
    return true;
  };
}

}  // namespace xstage::detail
