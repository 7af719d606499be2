#include "descriptor.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <regex>

#include <fmt/format.h>

#include "xstage/core/error.hpp"

namespace xstage::detail {

std::optional<int> own_descriptor(const std::string& path) {
  if (path == "-" || path == "/dev/stdout") return 1;
  if (path == "/dev/stdin") return 0;
  if (path == "/dev/stderr") return 2;
  static const std::regex fd_name(R"((?:/dev/fd|/proc/(self|thread-self|([0-9]+))/fd)/([0-9]{1,9}))");
  std::smatch m;
  if (!std::regex_match(path, m, fd_name)) return std::nullopt;
  if (m[2].matched && std::stol(m[2].str()) != long(::getpid())) return std::nullopt;
  return std::stoi(m[3].str());
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
