#include "output_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "xstage/error.hpp"

namespace xstage::detail {

namespace fs = std::filesystem;

namespace {

enum class Kind { missing, regular, folder, stream_like };

struct Destination {
  fs::path target;  // after following symlinks
  Kind kind = Kind::missing;
};

// Follows symlinks by hand (a dangling link names the file to create), so
// that the file replaced is the link's target and the link survives.
Destination resolve(const std::string& path, const std::string& what) {
  fs::path p(path);
  std::error_code ec;
  for (int hops = 0; fs::is_symlink(fs::symlink_status(p, ec)); ++hops) {
    if (hops == 40) throw Error(fmt::format("{} {}: too many levels of symbolic links", what, path));
    const fs::path to = fs::read_symlink(p, ec);
    if (ec) throw Error(fmt::format("{} {}: cannot read the symbolic link: {}", what, path, ec.message()));
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  Destination d{p, Kind::missing};
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return d;
  d.kind = S_ISREG(st.st_mode) ? Kind::regular : S_ISDIR(st.st_mode) ? Kind::folder : Kind::stream_like;
  return d;
}

// /dev/stdout and /proc/self/fd/N name an open descriptor: whatever it points
// at (a terminal, a pipe, or a file the shell redirected into), the bytes go
// through it, appended, never by replacing a file.
bool names_a_descriptor(const std::string& path) {
  return path.rfind("/dev/", 0) == 0 || path.rfind("/proc/", 0) == 0;
}

fs::path folder_of(const fs::path& target) {
  return target.has_parent_path() ? target.parent_path() : fs::path(".");
}

}  // namespace

void check_output_path(const std::string& path, const std::string& what, const std::vector<std::string>& inputs) {
  if (path.empty()) throw Error(fmt::format("{}: empty file name; expected a file to write", what));
  const Destination d = resolve(path, what);
  if (d.kind == Kind::folder)
    throw Error(fmt::format("{} {}: is a folder; expected a file name", what, path));
  if (d.kind == Kind::stream_like || names_a_descriptor(path)) {
    if (::access(d.target.c_str(), W_OK) != 0 && d.kind != Kind::missing)
      throw Error(fmt::format("{} {}: not writable: {}", what, path, std::strerror(errno)));
    return;
  }
  std::error_code ec;
  for (const std::string& in : inputs)
    if (d.kind == Kind::regular && fs::equivalent(d.target, in, ec))
      throw Error(fmt::format("{} {}: is also the input {}; refusing to overwrite an input", what, path, in));
  const fs::path folder = folder_of(d.target);
  if (!fs::is_directory(folder, ec))
    throw Error(fmt::format("{} {}: the folder {} does not exist", what, path, folder.string()));
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    throw Error(fmt::format("{} {}: cannot create files in {}: {}", what, path, folder.string(), std::strerror(errno)));
  if (d.kind == Kind::regular && ::access(d.target.c_str(), W_OK) != 0)
    throw Error(fmt::format("{} {}: not writable: {}", what, path, std::strerror(errno)));
}

OutputFile::OutputFile(const std::string& path, const std::string& what, const std::vector<std::string>& inputs)
    : path_(path), what_(what) {
  check_output_path(path, what, inputs);
  const Destination d = resolve(path, what);
  target_ = d.target.string();
  if (d.kind == Kind::stream_like || names_a_descriptor(path)) {
    out_.open(path, std::ios::out | std::ios::app | std::ios::binary);
    if (!out_) throw Error(fmt::format("{} {}: cannot open for writing", what, path));
    return;
  }
  std::string name = (folder_of(d.target) / ("." + d.target.filename().string() + ".xstage-XXXXXX")).string();
  const int fd = ::mkstemp(name.data());
  if (fd < 0) throw Error(fmt::format("{} {}: cannot create a file beside it: {}", what, path, std::strerror(errno)));
  // mkstemp makes the file private (0600): give it the mode the file it
  // replaces had, or a new file's usual mode.
  struct stat st {};
  mode_t mode;
  if (d.kind == Kind::regular && ::stat(d.target.c_str(), &st) == 0) {
    mode = st.st_mode & 07777;
  } else {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  ::fchmod(fd, mode);
  ::close(fd);
  aside_ = name;
  out_.open(aside_, std::ios::out | std::ios::trunc | std::ios::binary);
  if (!out_) {
    std::remove(aside_.c_str());
    throw Error(fmt::format("{} {}: cannot open {} for writing", what, path, aside_));
  }
}

void OutputFile::commit() {
  out_.flush();
  if (!out_) throw Error(fmt::format("{} {}: write failed (disk full?)", what_, path_));
  out_.close();
  if (!out_) throw Error(fmt::format("{} {}: write failed on close", what_, path_));
  if (!aside_.empty() && std::rename(aside_.c_str(), target_.c_str()) != 0)
    throw Error(fmt::format("{} {}: cannot rename {} into place: {}", what_, path_, aside_, std::strerror(errno)));
  committed_ = true;
}

OutputFile::~OutputFile() {
  if (committed_ || aside_.empty()) return;
  out_.close();
  std::remove(aside_.c_str());
}

}  // namespace xstage::detail
