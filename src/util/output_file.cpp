#include "output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>

#include <fmt/format.h>

#include "xstage/error.hpp"

namespace xstage::detail {

namespace fs = std::filesystem;

namespace {

enum class Kind { missing, regular, folder, stream_like };

struct Destination {
  fs::path target;  // after following symlinks
  Kind kind = Kind::missing;
  bool fifo = false;
};

// /dev/stdout, /dev/fd/N and /proc/self/fd/N name an open descriptor:
// whatever it points at (a terminal, a pipe, or a file the shell redirected
// into), the bytes go through it, appended, never by replacing a file. Other
// names under /dev and /proc are what stat() says they are (/dev/null a
// device, /dev/shm/x a file, /proc/version a file no one may write).
bool names_a_descriptor(const fs::path& p) {
  static const std::regex descriptor(R"(/dev/(stdout|stderr|fd/[0-9]+)|/proc/(self|thread-self|[0-9]+)/fd/[0-9]+)");
  return std::regex_match(p.string(), descriptor);
}

// Follows symlinks by hand (a dangling link names the file to create), so
// that the file replaced is the link's target and the link survives; a
// descriptor's name is where it stops (its link is no path).
Destination resolve(const std::string& path, const std::string& what) {
  fs::path p(path);
  std::error_code ec;
  for (int hops = 0; !names_a_descriptor(p) && fs::is_symlink(fs::symlink_status(p, ec)); ++hops) {
    if (hops == 40) throw Error(fmt::format("{} {}: too many levels of symbolic links", what, path));
    const fs::path to = fs::read_symlink(p, ec);
    if (ec) throw Error(fmt::format("{} {}: cannot read the symbolic link: {}", what, path, ec.message()));
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  Destination d{p, Kind::missing};
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return d;
  d.kind = S_ISREG(st.st_mode) ? Kind::regular : S_ISDIR(st.st_mode) ? Kind::folder : Kind::stream_like;
  d.fifo = S_ISFIFO(st.st_mode);
  return d;
}

bool written_directly(const Destination& d) { return d.kind == Kind::stream_like || names_a_descriptor(d.target); }

// Opens `path` to write without changing it (no O_CREAT, no O_TRUNC) and
// closes it: what permission bits do not show (a read-only file system,
// /proc, an immutable file, root's writes) shows here. Not for a FIFO, whose
// open would wait for a reader.
void try_opening(const fs::path& target, const std::string& path, const std::string& what) {
  const int fd = ::open(target.c_str(), O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("{} {}: not writable: {}", what, path, std::strerror(errno)));
  ::close(fd);
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
  if (written_directly(d)) {
    if (d.kind == Kind::missing) throw Error(fmt::format("{} {}: no such file or device", what, path));
    if (!d.fifo) try_opening(d.target, path, what);
    return;
  }
  std::error_code ec;
  for (const std::string& in : inputs)
    if (d.kind == Kind::regular && fs::equivalent(d.target, in, ec))
      throw Error(fmt::format("{} {}: is also the input {}; refusing to overwrite an input", what, path, in));
  const fs::path folder = folder_of(d.target);
  if (!fs::exists(folder, ec))
    throw Error(fmt::format("{} {}: the folder {} does not exist", what, path, folder.string()));
  if (!fs::is_directory(folder, ec))
    throw Error(fmt::format("{} {}: {} is not a folder", what, path, folder.string()));
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    throw Error(fmt::format("{} {}: cannot create files in {}: {}", what, path, folder.string(), std::strerror(errno)));
  if (d.kind == Kind::regular && ::access(d.target.c_str(), W_OK) != 0)
    throw Error(fmt::format("{} {}: not writable: {}", what, path, std::strerror(errno)));
  if (d.kind == Kind::regular) try_opening(d.target, path, what);
  // The file is written beside the target and renamed into place: make (and
  // remove) such a file now, so that a folder no one may write (a read-only
  // file system, /sys) fails here, before the work, also for root.
  std::string aside = (folder / ("." + d.target.filename().string() + ".xstage-XXXXXX")).string();
  const int fd = ::mkstemp(aside.data());
  if (fd < 0)
    throw Error(fmt::format("{} {}: cannot create files in {}: {}", what, path, folder.string(), std::strerror(errno)));
  ::close(fd);
  ::unlink(aside.c_str());
}

OutputFile::OutputFile(const std::string& path, const std::string& what, const std::vector<std::string>& inputs)
    : path_(path), what_(what) {
  check_output_path(path, what, inputs);
  const Destination d = resolve(path, what);
  target_ = d.target.string();
  if (written_directly(d)) {
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

void prepare_output_dir(const std::string& dir, const std::string& what, const std::string& first_file) {
  if (dir.empty()) throw Error(fmt::format("{}: empty folder name", what));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!std::filesystem::is_directory(dir))
    throw Error(fmt::format("{} {}: cannot make this folder{}", what, dir, ec ? ": " + ec.message() : ""));
  check_output_path(dir + "/" + first_file, what);
}

}  // namespace xstage::detail
