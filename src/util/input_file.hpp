#pragma once
// Opens a file named on the command line for reading, refusing what cannot be
// read as a file (a folder opens on Linux and then reads as empty, which would
// surface later as a confusing "no header" or an internal error).
#include <fstream>
#include <string>

namespace xstage::detail {

// Throws xstage::Error "<path>: cannot open for reading" or "<path>: is a folder".
std::ifstream open_for_reading(const std::string& path, bool binary = false);

// The whole file, for the small inputs (JSON reports, .npy arrays).
std::string read_whole_file(const std::string& path, bool binary = false);

}  // namespace xstage::detail
