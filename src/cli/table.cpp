#include "table.hpp"

#include <algorithm>

namespace xstage::cli {

std::string Table::text() const {
  std::vector<size_t> w(header_.size());
  for (size_t c = 0; c < header_.size(); ++c) w[c] = header_[c].size();
  for (const auto& r : rows_)
    for (size_t c = 0; c < r.size() && c < w.size(); ++c) w[c] = std::max(w[c], r[c].size());
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (size_t c = 0; c < w.size(); ++c) {
      const std::string& cell = c < r.size() ? r[c] : std::string();
      s += std::string(w[c] - cell.size() + (c ? 2 : 0), ' ') + cell;
    }
    return s + "\n";
  };
  std::string out = line(header_);
  for (const auto& r : rows_) out += line(r);
  return out;
}

std::string Table::csv() const {
  auto line = [](const std::vector<std::string>& r) {
    std::string s;
    for (size_t c = 0; c < r.size(); ++c) {
      const bool quote = r[c].find_first_of(",\"\n") != std::string::npos;
      std::string cell = r[c];
      if (quote) {
        std::string q = "\"";
        for (char ch : cell) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
        cell = q + "\"";
      }
      s += (c ? "," : "") + cell;
    }
    return s + "\n";
  };
  std::string out = line(header_);
  for (const auto& r : rows_) out += line(r);
  return out;
}

}  // namespace xstage::cli
