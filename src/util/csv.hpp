#pragma once
// Minimal CSV helpers shared by the readers (samples, schedules).
#include <cstdint>
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

// The lines of a stream read in large blocks, or of a text, as views (valid
// until the next call) without a copy per line: the reader of a probe CSV of
// millions of rows. The line has no '\n'; a UTF-8 byte-order mark before the
// first line is dropped, as lines_of does. A line longer than
// kMaxLineBytes (input_file.hpp) is an xstage::Error naming `name` and the
// line: /dev/zero through a pipe has no line break, and a reader that waited
// for one would hold all of it.
class LineReader {
 public:
  explicit LineReader(std::istream& in, std::string name = "input");
  explicit LineReader(std::string_view text, std::string name = "input");  // `text` must outlive the reader
  bool next(std::string_view& line);
  uint64_t bytes_read() const { return consumed_; }

 private:
  bool refill();
  std::istream* in_ = nullptr;
  std::string buf_;
  std::string_view text_;  // what is left: of the text, or of the buffer
  uint64_t consumed_ = 0;
  uint64_t lines_ = 0;
  std::string name_;
  bool first_ = true;
};

// Splits one line into views: into the line itself, or (a line with a
// quoted field) into `storage`, as split_csv_line_into does. `where` names the
// line in the error for an unterminated quote.
void split_csv_views(std::string_view line, const std::function<std::string()>& where,
                     std::vector<std::string_view>& out, std::vector<std::string>& storage);

// A whole cell as a finite number ("12", "-3.5e6", "+7"): false for anything
// else (an empty cell, trailing text, a NUL byte, inf, nan, out of range).
bool parse_finite(std::string_view cell, double& value);

}  // namespace xstage::detail
