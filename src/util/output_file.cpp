#include "output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>

#include <fmt/format.h>

#include "descriptor.hpp"
#include "xstage/core/error.hpp"

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
// into), the bytes go through it, never by replacing a file. Other names
// under /dev and /proc are what stat() says they are (/dev/null a device,
// /dev/shm/x a file, /proc/version a file no one may write).
bool names_a_descriptor(const fs::path& p) {
  const std::string s = p.string();
  return s == "/dev/stdout" || s == "/dev/stderr" || parse_descriptor_name(s).has_value();
}

// Follows symlinks by hand (a dangling link names the file to create), so
// that the file replaced is the link's target and the link survives; a
// descriptor's name is where it stops (its link is no path).
Destination resolve(const std::string& path, const std::string& what) {
  fs::path p(path);
  std::error_code ec;
  for (int hops = 0; !names_a_descriptor(p) && fs::is_symlink(fs::symlink_status(p, ec)); ++hops) {
    if (hops == 40)
      throw Error(fmt::format("{} {}: too many levels of symbolic links; expected a file or a link to one", what, path));
    const fs::path to = fs::read_symlink(p, ec);
    if (ec) throw Error(fmt::format("{} {}: cannot read the symbolic link: {}; expected a readable link or a file", what, path, ec.message()));
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

// The descriptor of this process that `path` names, directly or through
// symlinks (a link to /dev/stdout): written through, never reopened by name.
std::optional<int> named_descriptor(const std::string& path) {
  if (auto fd = own_descriptor(path)) return fd;
  std::error_code ec;
  if (!fs::is_symlink(fs::symlink_status(path, ec))) return std::nullopt;
  return own_descriptor(resolve(path, "output").target.string());
}

// stdout or stderr of this process, written through its stream (std::cout,
// std::cerr) so that the bytes keep their order with what the command prints.
std::optional<int> standard_stream(const std::string& path) {
  if (auto fd = named_descriptor(path); fd && (*fd == 1 || *fd == 2)) return fd;
  return std::nullopt;
}

// Another descriptor the process inherited (/dev/fd/3 from the shell's
// 3>FILE, /dev/fd/63 from >(...)): written through a duplicate of it.
std::optional<int> inherited_descriptor(const std::string& path) {
  if (auto fd = named_descriptor(path); fd && *fd != 1 && *fd != 2) return fd;
  return std::nullopt;
}

void check_descriptor_writable(int fd, const std::string& path, const std::string& what) {
  switch (descriptor_access(fd)) {
    case DescriptorAccess::closed:
      throw Error(fmt::format("{} {}: descriptor {} is not open in this process; expected a descriptor opened for "
                              "writing (as by the shell's {}>FILE) or a file name",
                              what, path, fd, fd));
    case DescriptorAccess::read_only:
      throw Error(fmt::format("{} {}: descriptor {} is open only for reading; expected one open for writing (as by "
                              "the shell's {}>FILE)",
                              what, path, fd, fd));
    default: break;
  }
}

// Opens `path` to write without changing it (no O_CREAT, no O_TRUNC) and
// closes it: what permission bits do not show (a read-only file system,
// /proc, an immutable file, root's writes) shows here. Not for a FIFO, whose
// open would wait for a reader.
void try_opening(const fs::path& target, const std::string& path, const std::string& what) {
  const int fd = ::open(target.c_str(), O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    throw Error(fmt::format("{} {}: not writable: {}; expected a file this user may write", what, path,
                            std::strerror(errno)));
  ::close(fd);
}

fs::path folder_of(const fs::path& target) {
  return target.has_parent_path() ? target.parent_path() : fs::path(".");
}

// /dev (but /dev/shm, a memory file system for files), /proc and /sys hold
// devices and the kernel's files: a new name there is a typo, not a file.
bool in_system_folder(const fs::path& target) {
  const std::string t = fs::absolute(target).lexically_normal().string();
  for (const char* sys : {"/dev/", "/proc/", "/sys/"})
    if (t.rfind(sys, 0) == 0) return t.rfind("/dev/shm/", 0) != 0;
  return false;
}

// What names one file: the descriptor, the file on disk, or (a file yet to
// be made) its path with links and `..` resolved.
std::string identity(const std::string& path) {
  struct stat st {};
  if (auto fd = named_descriptor(path)) {
    // An inherited descriptor on a file is that file (`-o /dev/fd/3 3>>in.csv`
    // would write into an input); stdout and stderr stay themselves, as
    // before, whatever the shell pointed them at.
    if (*fd > 2 && ::fstat(*fd, &st) == 0 && S_ISREG(st.st_mode))
      return fmt::format("inode {}:{}", st.st_dev, st.st_ino);
    return fmt::format("fd {}", *fd);
  }
  if (::stat(path.c_str(), &st) == 0) return fmt::format("inode {}:{}", st.st_dev, st.st_ino);
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return "path " + p.string();
}

}  // namespace

bool same_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  return identity(a) == identity(b);
}

void check_output_path(const std::string& path, const std::string& what, const std::vector<std::string>& inputs) {
  if (path.empty()) throw Error(fmt::format("{}: empty file name; expected a file to write", what));
  if (auto fd = standard_stream(path)) {
    check_descriptor_writable(*fd, path, what);
    return;
  }
  const std::optional<int> inherited = inherited_descriptor(path);
  if (inherited) check_descriptor_writable(*inherited, path, what);
  const Destination d = resolve(path, what);
  if (d.kind == Kind::folder && !inherited) throw Error(fmt::format("{} {}: is a folder; expected a file name", what, path));
  struct stat in_st {};
  for (const std::string& in : inputs)  // an input that is no file (an embedded profile's name) cannot be overwritten
    if (!in.empty() && ::stat(in.c_str(), &in_st) == 0 && same_file(path, in))
      throw Error(fmt::format("{} {}: is also the input {}; refusing to overwrite an input; expected another file",
                              what, path, in));
  if (inherited) return;
  if (written_directly(d)) {
    if (d.kind == Kind::missing)
      throw Error(fmt::format("{} {}: no such file or device; expected an open descriptor or an existing device", what,
                              path));
    if (!d.fifo) try_opening(d.target, path, what);
    return;
  }
  const fs::path folder = folder_of(d.target);
  if (d.kind == Kind::missing && in_system_folder(d.target))
    throw Error(fmt::format("{} {}: no such device, and cannot create files in {}; expected an existing device or a "
                            "file outside /dev, /proc and /sys",
                            what, path, folder.string()));
  std::error_code ec;
  if (!fs::exists(folder, ec))
    throw Error(fmt::format("{} {}: the folder {} does not exist; expected an existing folder", what, path,
                            folder.string()));
  if (!fs::is_directory(folder, ec))
    throw Error(fmt::format("{} {}: {} is not a folder; expected a folder", what, path, folder.string()));
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    throw Error(fmt::format("{} {}: cannot create files in {}: {}; expected a folder this user may write", what, path,
                            folder.string(), std::strerror(errno)));
  if (d.kind == Kind::regular && ::access(d.target.c_str(), W_OK) != 0)
    throw Error(fmt::format("{} {}: not writable: {}; expected a file this user may write", what, path,
                            std::strerror(errno)));
  if (d.kind == Kind::regular) try_opening(d.target, path, what);
  // The file is written beside the target and renamed into place: make (and
  // remove) such a file now, so that a folder no one may write (a read-only
  // file system, /sys) fails here, before the work, also for root.
  std::string aside = (folder / ("." + d.target.filename().string() + ".xstage-XXXXXX")).string();
  const int fd = ::mkstemp(aside.data());
  if (fd < 0)
    throw Error(fmt::format("{} {}: cannot create files in {}: {}; expected a folder this user may write", what, path,
                            folder.string(), std::strerror(errno)));
  ::close(fd);
  ::unlink(aside.c_str());
}

namespace {
// A device that takes any number of writers without mixing anything up
// (/dev/null and the kernel's other memory devices, major number 1): two
// outputs may both go there.
bool shared_sink(const std::string& path) {
  struct stat st {};
  return !standard_stream(path) && ::stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode) && major(st.st_rdev) == 1;
}
}  // namespace

void check_outputs(const std::vector<NamedOutput>& outputs, const std::vector<std::string>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].path.empty() && outputs[i].what.empty()) continue;
    check_output_path(outputs[i].path, outputs[i].what, inputs);
    for (size_t j = 0; j < i; ++j)
      if (!outputs[j].path.empty() && same_file(outputs[i].path, outputs[j].path) && !shared_sink(outputs[i].path))
        throw Error(fmt::format("{} {} and {} {}: one file for two outputs; expected a file of its own for each",
                                outputs[j].what, outputs[j].path, outputs[i].what, outputs[i].path));
  }
}

OutputFile::OutputFile(const std::string& path, const std::string& what, const std::vector<std::string>& inputs)
    : path_(path), what_(what) {
  check_output_path(path, what, inputs);
  if (auto fd = standard_stream(path)) {
    if (*fd == 2) std::cout.flush();  // what the command printed first comes first
    out_ = *fd == 1 ? &std::cout : &std::cerr;
    return;
  }
  if (auto fd = inherited_descriptor(path)) {
    descriptor_ = std::make_unique<DescriptorBuf>(*fd);
    own_stream_ = std::make_unique<std::ostream>(descriptor_.get());
    out_ = own_stream_.get();
    return;
  }
  const Destination d = resolve(path, what);
  target_ = d.target.string();
  if (written_directly(d)) {
    file_ = std::make_unique<std::ofstream>(path, std::ios::out | std::ios::app | std::ios::binary);
    if (!*file_)
      throw Error(fmt::format("{} {}: cannot open for writing: {}; expected a device or pipe this user may write", what,
                              path, std::strerror(errno)));
    out_ = file_.get();
    return;
  }
  std::string name = (folder_of(d.target) / ("." + d.target.filename().string() + ".xstage-XXXXXX")).string();
  const int fd = ::mkstemp(name.data());
  if (fd < 0) throw Error(fmt::format("{} {}: cannot create a file beside it: {}; expected a folder this user may write", what, path, std::strerror(errno)));
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
  file_ = std::make_unique<std::ofstream>(aside_, std::ios::out | std::ios::trunc | std::ios::binary);
  if (!*file_) {
    std::remove(aside_.c_str());
    throw Error(fmt::format("{} {}: cannot open {} for writing; expected a folder this user may write", what, path, aside_));
  }
  out_ = file_.get();
}

void OutputFile::finish() {
  if (finished_) return;
  out_->flush();
  if (!*out_) throw Error(fmt::format("{} {}: write failed; expected room on the disk", what_, path_));
  if (file_) {
    file_->close();
    if (!*file_) throw Error(fmt::format("{} {}: write failed on close; expected room on the disk", what_, path_));
  }
  finished_ = true;
}

void OutputFile::commit() {
  finish();
  if (!aside_.empty() && std::rename(aside_.c_str(), target_.c_str()) != 0)
    throw Error(fmt::format("{} {}: cannot rename {} into place: {}; expected a folder where files can be renamed", what_, path_, aside_, std::strerror(errno)));
  committed_ = true;
}

OutputFile::~OutputFile() {
  if (committed_ || aside_.empty()) return;
  if (file_) file_->close();
  std::remove(aside_.c_str());
}

void commit_all(const std::vector<OutputFile*>& files) {
  for (OutputFile* f : files) f->finish();
  for (OutputFile* f : files) f->commit();
}

void prepare_output_dir(const std::string& dir, const std::string& what, const std::string& first_file,
                        const std::vector<std::string>& inputs) {
  if (dir.empty()) throw Error(fmt::format("{}: empty folder name; expected a folder to write into", what));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!std::filesystem::is_directory(dir))
    throw Error(fmt::format("{} {}: cannot make this folder{}; expected a folder", what, dir,
                            ec ? ": " + ec.message() : ""));
  check_output_path(dir + "/" + first_file, what, inputs);
}

}  // namespace xstage::detail
