#include "csv.hpp"

#include <charconv>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "input_file.hpp"
#include "xstage/core/error.hpp"

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
  if (quoted) throw Error(fmt::format("{}: unterminated quoted field; expected a closing \" before the line ends", where));
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

namespace {
constexpr size_t kBlock = size_t(1) << 20;
}  // namespace

LineReader::LineReader(std::istream& in, std::string name) : in_(&in), name_(std::move(name)) {}

LineReader::LineReader(std::string_view text, std::string name) : text_(text), name_(std::move(name)) {}

// Moves what is left of the buffer to its front and reads another block
// behind it; false at the end of the stream.
bool LineReader::refill() {
  if (!in_ || !*in_) return false;
  const size_t left = text_.size();
  if (left) std::memmove(buf_.data(), text_.data(), left);
  buf_.resize(std::max(buf_.size(), left + kBlock));
  in_->read(buf_.data() + left, static_cast<std::streamsize>(buf_.size() - left));
  const size_t got = static_cast<size_t>(in_->gcount());
  text_ = std::string_view(buf_.data(), left + got);
  return got > 0;
}

bool LineReader::next(std::string_view& line) {
  size_t end;
  while ((end = text_.find('\n')) == std::string_view::npos) {
    if (text_.size() > kMaxLineBytes)
      throw Error(fmt::format("{}: line {}: more than {} without a line break; expected CSV lines", name_,
                              lines_ + 1, cap_text(kMaxLineBytes)));
    if (!refill()) break;
  }
  if (end != std::string_view::npos && end > kMaxLineBytes)
    throw Error(fmt::format("{}: line {}: more than {} without a line break; expected CSV lines", name_, lines_ + 1,
                            cap_text(kMaxLineBytes)));
  ++lines_;
  if (text_.empty()) return false;
  if (end == std::string_view::npos) end = text_.size();  // the last line, without '\n'
  line = text_.substr(0, end);
  const size_t used = std::min(text_.size(), end + 1);
  text_.remove_prefix(used);
  consumed_ += used;
  if (first_ && line.substr(0, kUtf8Bom.size()) == kUtf8Bom) line.remove_prefix(kUtf8Bom.size());
  first_ = false;
  return true;
}

void split_csv_views(std::string_view line, const std::function<std::string()>& where,
                     std::vector<std::string_view>& out, std::vector<std::string>& storage) {
  out.clear();
  if (line.find('"') != std::string_view::npos) {  // quoted fields: the general splitter
    split_csv_line_into(std::string(line), where(), storage);
    for (const std::string& f : storage) out.emplace_back(f);
    return;
  }
  auto trimmed = [](std::string_view f) {
    const size_t a = f.find_first_not_of(" \t\r");
    if (a == std::string_view::npos) return std::string_view();
    return f.substr(a, f.find_last_not_of(" \t\r") - a + 1);
  };
  size_t a = 0;
  for (size_t b; (b = line.find(',', a)) != std::string_view::npos; a = b + 1) out.push_back(trimmed(line.substr(a, b - a)));
  out.push_back(trimmed(line.substr(a)));
}

bool parse_finite(std::string_view cell, double& value) {
  if (!cell.empty() && cell[0] == '+' && (cell.size() == 1 || cell[1] != '-')) cell.remove_prefix(1);
  const char* end = cell.data() + cell.size();
  const auto r = std::from_chars(cell.data(), end, value);
  return !cell.empty() && r.ec == std::errc() && r.ptr == end && std::isfinite(value);
}

}  // namespace xstage::detail
