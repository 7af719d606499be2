#include "descriptor.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "xstage/core/error.hpp"

namespace xstage::detail {

namespace {
bool all_digits(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
}
}  // namespace

std::optional<DescriptorName> parse_descriptor_name(std::string_view path) {
  std::string_view fd;
  DescriptorName name;
  if (path.starts_with("/dev/fd/")) {
    fd = path.substr(8);
  } else if (path.starts_with("/proc/")) {
    const std::string_view rest = path.substr(6);
    const size_t slash = rest.find('/');
    if (slash == std::string_view::npos || !rest.substr(slash).starts_with("/fd/")) return std::nullopt;
    const std::string_view who = rest.substr(0, slash);
    if (who != "self" && who != "thread-self") {
      if (!all_digits(who)) return std::nullopt;
      name.pid = std::string(who);
    }
    fd = rest.substr(slash + 4);
  } else {
    return std::nullopt;
  }
  if (!all_digits(fd)) return std::nullopt;
  name.fd = std::string(fd);
  return name;
}

std::optional<int> own_descriptor(const std::string& path) {
  if (path == "-" || path == "/dev/stdout") return 1;
  if (path == "/dev/stdin") return 0;
  if (path == "/dev/stderr") return 2;
  const std::optional<DescriptorName> name = parse_descriptor_name(path);
  if (!name || name->fd.size() > 9) return std::nullopt;
  if (!name->pid.empty()) {
    // Another process's descriptor is a file to reopen; so is a pid past any this process can have.
    const size_t first = std::min(name->pid.find_first_not_of('0'), name->pid.size());
    const std::string_view digits = std::string_view(name->pid).substr(first);
    if (digits.size() > 18 || std::stol(std::string(digits.empty() ? "0" : digits)) != long(::getpid()))
      return std::nullopt;
  }
  return std::stoi(name->fd);
}

DescriptorAccess descriptor_access(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return DescriptorAccess::closed;
  switch (flags & O_ACCMODE) {
    case O_RDONLY: return DescriptorAccess::read_only;
    case O_WRONLY: return DescriptorAccess::write_only;
    default: return DescriptorAccess::read_write;
  }
}

namespace {
constexpr size_t kBufferBytes = size_t(64) << 10;
}

DescriptorBuf::DescriptorBuf(int fd) : fd_(::fcntl(fd, F_DUPFD_CLOEXEC, 3)) {
  if (fd_ < 0) throw Error(fmt::format("descriptor {}: cannot duplicate it: {}; expected an open descriptor", fd,
                                       std::strerror(errno)));
  out_.resize(kBufferBytes);
  setp(out_.data(), out_.data() + out_.size());
}

DescriptorBuf::~DescriptorBuf() {
  drain();
  ::close(fd_);
}

DescriptorBuf::int_type DescriptorBuf::underflow() {
  if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
  in_.resize(kBufferBytes);
  ssize_t n;
  do n = ::read(fd_, in_.data(), in_.size());
  while (n < 0 && errno == EINTR);
  // A failed read is no end of input: the throw sets the stream's badbit,
  // which the readers report as "read failed", rather than a short file.
  if (n < 0) throw Error(fmt::format("descriptor read failed: {}; expected a readable descriptor", std::strerror(errno)));
  if (n == 0) return traits_type::eof();
  setg(in_.data(), in_.data(), in_.data() + n);
  return traits_type::to_int_type(*gptr());
}

bool DescriptorBuf::drain() {
  const char* at = pbase();
  while (at < pptr()) {
    const ssize_t n = ::write(fd_, at, size_t(pptr() - at));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += n;
  }
  setp(out_.data(), out_.data() + out_.size());
  return true;
}

DescriptorBuf::int_type DescriptorBuf::overflow(int_type c) {
  if (!drain()) return traits_type::eof();
  if (!traits_type::eq_int_type(c, traits_type::eof())) {
    *pptr() = traits_type::to_char_type(c);
    pbump(1);
  }
  return traits_type::not_eof(c);
}

int DescriptorBuf::sync() { return drain() ? 0 : -1; }

}  // namespace xstage::detail
