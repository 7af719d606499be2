#pragma once
// The names of this process's own open descriptors (/dev/stdin, /dev/stdout,
// /dev/fd/N, /proc/self/fd/N), and streams that read or write through one.
//
// Opening such a name reopens whatever the descriptor points at: a regular
// file from its start (not where the descriptor stands) and with the mode
// its permission bits allow (a descriptor the shell opened to read becomes
// writable), a socket not at all. A user who writes `-o /dev/fd/3 3>out` or
// `fit /dev/fd/3 3<rows.csv` means the descriptor itself: its offset, its
// mode, its pipe or socket. So inputs and outputs named this way are read
// from and written to a duplicate of the descriptor, never reopened.
#include <optional>
#include <streambuf>
#include <string>
#include <string_view>

namespace xstage::detail {

// The descriptor of this process that `path` names, as written: 0 for
// /dev/stdin, 1 for `-` and /dev/stdout, 2 for /dev/stderr, N for /dev/fd/N,
// /proc/self/fd/N, /proc/thread-self/fd/N and /proc/<this pid>/fd/N; none for
// any other name (another process's descriptor is a file to reopen).
std::optional<int> own_descriptor(const std::string& path);

// A descriptor's name by its parts: /dev/fd/N, or /proc/P/fd/N where P is
// self, thread-self or a process id; digits as written (any count). None for
// any other name. Parsed by hand: the library takes no C++ regular
// expressions, which crashed inside a PyTorch process (test_layering.cpp).
struct DescriptorName {
  std::string pid;  // the process id's digits; empty for /dev/fd, self and thread-self
  std::string fd;   // N's digits
};
std::optional<DescriptorName> parse_descriptor_name(std::string_view path);

// How a descriptor is open: whether it is open at all, and for reading or
// writing (fcntl F_GETFL).
enum class DescriptorAccess { closed, read_only, write_only, read_write };
DescriptorAccess descriptor_access(int fd);

// A stream buffer over a duplicate of `fd` (dup, close-on-exec): reads or
// writes go through the descriptor at its offset (shared with the original)
// and in its mode; closing the duplicate leaves the original open. Writes are
// buffered (64 KiB) and retried after EINTR and partial writes; a failed
// write makes sync() fail, so the owning stream's badbit tells of it.
class DescriptorBuf : public std::streambuf {
 public:
  explicit DescriptorBuf(int fd);  // throws xstage::Error when dup fails
  ~DescriptorBuf() override;
  DescriptorBuf(const DescriptorBuf&) = delete;
  DescriptorBuf& operator=(const DescriptorBuf&) = delete;

 protected:
  int_type underflow() override;
  int_type overflow(int_type c) override;
  int sync() override;

 private:
  bool drain();  // writes what is buffered; false on a failed write
  int fd_ = -1;
  std::string in_, out_;
};

}  // namespace xstage::detail
