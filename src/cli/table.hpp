#pragma once
// Output for people (aligned table), and for programs (CSV, JSON).
#include <string>
#include <vector>

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

}  // namespace xstage::cli
