#pragma once
// Writes a whole file aside (path + ".tmp") and renames it into place, so
// that a failed write never leaves half a file. Errors name the option that
// gave the path (`what`, e.g. "-o") and the file.
#include <string>

namespace xstage::detail {

void write_file_replacing(const std::string& path, const std::string& text, const std::string& what);

}  // namespace xstage::detail
