#pragma once
// Writes a whole file through OutputFile (output_file.hpp): aside and renamed
// into place for a regular file, straight through for a device or pipe, so
// that a failed write never leaves half a file. Errors name the option that
// gave the path (`what`, e.g. "-o") and the file.
#include <string>

namespace xstage::detail {

void write_file_replacing(const std::string& path, const std::string& text, const std::string& what);

// The same for a file no option names (the probe's outputs in its folder):
// errors name the file alone.
void write_file_replacing(const std::string& path, const std::string& text);

}  // namespace xstage::detail
