#pragma once
// Minimal CSV helpers shared by the readers (samples, schedules).
#include <functional>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

namespace xstage::detail {

std::string trim(const std::string& s);
// Splits one line; fields may be double-quoted ("" is a quote inside).
// Throws xstage::Error naming `where` for an unterminated quote.
std::vector<std::string> split_csv_line(const std::string& line, const std::string& where);
// The same into `out`, reusing its strings' storage: no allocation per field
// on the millions of rows of a large probe CSV.
void split_csv_line_into(const std::string& line, const std::string& where, std::vector<std::string>& out);

// A source of lines, one at a time, so that a reader never holds a second
// copy of a large file: `next` sets `line` (without its '\n') and returns
// false at the end. A UTF-8 byte-order mark before the first line is dropped
// (spreadsheets write one), so that it does not become part of a column name.
using NextLine = std::function<bool(std::string& line)>;
NextLine lines_of(std::istream& in);
NextLine lines_of(std::string_view text);  // `text` must outlive the reader

}  // namespace xstage::detail
