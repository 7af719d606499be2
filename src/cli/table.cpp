#include "table.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

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

std::string csv_of(const std::vector<std::string>& columns, const nlohmann::json& rows) {
  Table t(columns);
  for (const nlohmann::json& r : rows) {
    if (!r.is_object() || r.size() != columns.size())
      throw std::logic_error(fmt::format("csv_of: a row with {} keys for {} columns", r.size(), columns.size()));
    std::vector<std::string> cells;
    for (const std::string& c : columns) {
      const auto it = r.find(c);
      if (it == r.end()) throw std::logic_error("csv_of: a row without the column " + c);
      if (it->is_null())
        cells.emplace_back();
      else if (it->is_string())
        cells.push_back(it->get<std::string>());
      else if (it->is_number_float())
        cells.push_back(fmt::format("{}", it->get<double>()));
      else if (it->is_number() || it->is_boolean())
        cells.push_back(it->dump());
      else
        throw std::logic_error("csv_of: column " + c + " is not a plain value");
    }
    t.add(std::move(cells));
  }
  return t.csv();
}

nlohmann::json num_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace xstage::cli
