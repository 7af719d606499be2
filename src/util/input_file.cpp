#include "input_file.hpp"

#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "xstage/error.hpp"

namespace xstage::detail {

std::ifstream open_for_reading(const std::string& path, bool binary) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(fmt::format("{}: is a folder; expected a file", path));
  std::ifstream in(path, binary ? std::ios::binary : std::ios::in);
  if (!in) throw Error(fmt::format("{}: cannot open for reading", path));
  return in;
}

std::string read_whole_file(const std::string& path, bool binary) {
  std::ifstream in = open_for_reading(path, binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(fmt::format("{}: read failed", path));
  return ss.str();
}

}  // namespace xstage::detail
