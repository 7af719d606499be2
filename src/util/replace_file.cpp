#include "replace_file.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "xstage/error.hpp"

namespace xstage::detail {

void write_file_replacing(const std::string& path, const std::string& text, const std::string& what) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) throw Error(fmt::format("{} {}: cannot open for writing", what, tmp));
    f << text;
    if (!f) throw Error(fmt::format("{} {}: write failed", what, tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error(fmt::format("{} {}: cannot rename {} into place", what, path, tmp));
}

void write_file_replacing(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) throw Error(fmt::format("{}: cannot open for writing", path));
    f << text;
    if (!f) throw Error(fmt::format("{}: write failed", path));
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace xstage::detail
