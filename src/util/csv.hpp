#pragma once
// Minimal CSV helpers shared by the readers (samples, schedules).
#include <string>
#include <vector>

namespace xstage::detail {

std::string trim(const std::string& s);
// Splits one line; fields may be double-quoted ("" is a quote inside).
// Throws xstage::Error naming `where` for an unterminated quote.
std::vector<std::string> split_csv_line(const std::string& line, const std::string& where);

}  // namespace xstage::detail
