#include "input_file.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "descriptor.hpp"
#include "xstage/core/error.hpp"

namespace xstage::detail {

std::string cap_text(uint64_t bytes) {
  if (bytes >= (uint64_t(1) << 30) && bytes % (uint64_t(1) << 30) == 0) return fmt::format("{} GiB", bytes >> 30);
  if (bytes >= (uint64_t(1) << 20) && bytes % (uint64_t(1) << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  return fmt::format("{} bytes", bytes);
}

bool input_exists(const std::string& path) {
  struct stat st {};
  return !path.empty() && (own_descriptor(path) || ::stat(path.c_str(), &st) == 0);
}

namespace {

// What the descriptor `fd`, named by `path`, holds, once it is known to be
// open for reading.
struct stat descriptor_status(int fd, const std::string& path) {
  switch (descriptor_access(fd)) {
    case DescriptorAccess::closed:
      throw Error(fmt::format("{}: descriptor {} is not open in this process; expected a descriptor opened for reading "
                              "(as by the shell's {}<FILE) or a file name",
                              path, fd, fd));
    case DescriptorAccess::write_only:
      throw Error(fmt::format("{}: descriptor {} is open only for writing; expected one open for reading (as by the "
                              "shell's {}<FILE)",
                              path, fd, fd));
    default: break;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw Error(fmt::format("{}: cannot inspect descriptor {}: {}; expected an open descriptor", path, fd,
                            std::strerror(errno)));
  return st;
}

// A stream reading a duplicate of an inherited descriptor.
class DescriptorInput : public std::istream {
 public:
  explicit DescriptorInput(int fd) : std::istream(nullptr), buf_(fd) { rdbuf(&buf_); }

 private:
  DescriptorBuf buf_;
};

}  // namespace

void check_input_path(const std::string& path) {
  if (path.empty()) throw Error("input: empty file name; expected a file to read");
  const std::optional<int> fd = own_descriptor(path);
  struct stat st {};
  if (fd) {
    st = descriptor_status(*fd, path);
    if (S_ISSOCK(st.st_mode)) return;  // a socket handed down is a stream like a pipe
  } else if (::stat(path.c_str(), &st) != 0) {
    throw Error(fmt::format("{}: cannot open for reading: {}; expected an existing file", path, std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) throw Error(fmt::format("{}: is a folder; expected a file", path));
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
    throw Error(fmt::format("{}: is a device, not a file of data; expected a file or a pipe", path));
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode))
    throw Error(fmt::format("{}: is neither a file nor a pipe; expected a file or a pipe", path));
}

std::unique_ptr<std::istream> open_for_reading(const std::string& path, bool binary) {
  check_input_path(path);
  if (const std::optional<int> fd = own_descriptor(path)) return std::make_unique<DescriptorInput>(*fd);
  auto in = std::make_unique<std::ifstream>(path, binary ? std::ios::binary : std::ios::in);
  if (!*in)
    throw Error(fmt::format("{}: cannot open for reading: {}; expected a file this user may read", path,
                            std::strerror(errno)));
  return in;
}

std::string read_whole_file(const std::string& path, bool binary, uint64_t max_bytes, const std::string& kind) {
  auto too_big = [&](const std::string& size) {
    return Error(fmt::format("{}: {}; expected {} of at most {} (the cap on inputs read whole, docs/robustness.md)",
                             path, size, kind, cap_text(max_bytes)));
  };
  check_input_path(path);
  const std::optional<int> fd = own_descriptor(path);
  struct stat st {};
  if ((fd ? ::fstat(*fd, &st) : ::stat(path.c_str(), &st)) == 0 && S_ISREG(st.st_mode) &&
      uint64_t(st.st_size) > max_bytes)
    throw too_big(fmt::format("{} bytes", st.st_size));
  const std::unique_ptr<std::istream> stream = open_for_reading(path, binary);
  std::istream& in = *stream;
  // Blocks, not one read of the whole: a pipe says nothing of its length, and
  // a regular file may grow while it is read.
  std::string text;
  constexpr size_t kBlock = size_t(1) << 20;
  while (in) {
    const size_t at = text.size();
    if (at > max_bytes) throw too_big(fmt::format("more than {}", cap_text(max_bytes)));
    text.resize(at + kBlock);
    in.read(text.data() + at, std::streamsize(kBlock));
    text.resize(at + size_t(in.gcount()));
  }
  if (in.bad()) throw Error(fmt::format("{}: read failed; expected a file or stream that can be read to its end", path));
  if (text.size() > max_bytes) throw too_big(fmt::format("more than {}", cap_text(max_bytes)));
  return text;
}

}  // namespace xstage::detail
