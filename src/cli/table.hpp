#pragma once
// Output for people (aligned table), and for programs (CSV, JSON).
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace xstage::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string text() const;  // columns aligned, right-justified
  std::string csv() const;
  const std::vector<std::vector<std::string>>& rows() const { return rows_; }

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

enum class Format { table, json, csv };

// A list of results as CSV from the same JSON objects `--json` prints, so that
// both carry the same fields on every run: one column per name in `columns`,
// in that order; null is an empty cell, numbers in full precision, booleans
// true/false. A row whose keys are not exactly `columns` is a programming
// error (std::logic_error): every result row has every key, null where absent.
std::string csv_of(const std::vector<std::string>& columns, const nlohmann::json& rows);

// A measured number, or null where there is none (NaN, infinity): JSON has no
// NaN, and a reader must not mistake a missing value for a number.
nlohmann::json num_or_null(double v);

}  // namespace xstage::cli
