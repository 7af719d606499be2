// Inputs and outputs named by one of the process's own descriptors
// (/dev/fd/N, /proc/self/fd/N with N >= 3): read from and written to the
// descriptor itself, never reopened by name (util/descriptor.hpp says why).
// Through the command (a shell opens the descriptor for the child) and
// through the reader and writer directly (a socket, an offset).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "cli_runner.hpp"
#include "scratch_files.hpp"
#include "util/descriptor.hpp"
#include "util/input_file.hpp"
#include "util/output_file.hpp"
#include "xstage/core/device.hpp"
#include "xstage/core/error.hpp"

namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) { return scratch_dir("xstage-fd-", name); }

// Enough rows of one clean interconnect for fit to succeed.
std::string samples() {
  std::string s = "K,V_bytes,gap_ns,issue_ns\n";
  for (int K : {8, 32, 132})
    for (double V : {262144.0, 1048576.0, 4194304.0})
      for (double G : {0.0, 20000.0}) {
        const double t = std::max(2000 + V / std::min(K * 7e9, 50e9) * 1e9, V / 25e9 * 1e9 - G);
        s += std::to_string(K) + "," + std::to_string(V) + "," + std::to_string(G) + "," + std::to_string(t) + "\n";
      }
  return s;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const xstage::Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(InheritedDescriptors, FitReadsAndWritesTheShellsDescriptors) {
  const fs::path d = scratch("cli");
  write_text(d / "s.csv", samples());
  const std::string s = (d / "s.csv").string(), out = (d / "out.json").string();
  // The samples from descriptor 3, the profile to descriptor 4.
  const CliRun r = run_cli("fit /dev/fd/3 -o /proc/self/fd/4 --bootstrap 0 3<" + s + " 4>" + out);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(read_text(out).find("\"R_Bps\""), std::string::npos) << read_text(out);
  // Written where the descriptor stands: after what the shell wrote first
  // (a reopened name, truncated or replaced, would have lost "first").
  write_text(d / "log", "first\n");
  const CliRun b = run_cli("fit " + s + " -o /dev/fd/3 --bootstrap 0 3>>" + (d / "log").string());
  ASSERT_EQ(b.rc, 0) << b.out;
  EXPECT_EQ(read_text(d / "log").rfind("first\n{", 0), 0u) << read_text(d / "log");
}

TEST(InheritedDescriptors, WrongWayOrClosedDescriptorsAreRefused) {
  const fs::path d = scratch("refused");
  write_text(d / "s.csv", samples());
  write_text(d / "keep.json", "keep");
  const std::string s = (d / "s.csv").string(), keep = (d / "keep.json").string();
  // Open only for reading: by name it would have been reopened for writing.
  CliRun r = run_cli("fit " + s + " -o /dev/fd/3 3<" + keep);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("xstage: error: -o /dev/fd/3: descriptor 3 is open only for reading; expected one open for "
                       "writing (as by the shell's 3>FILE)"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(read_text(keep), "keep");
  r = run_cli("fit " + s + " -o /dev/fd/9");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("-o /dev/fd/9: descriptor 9 is not open in this process; expected a descriptor opened for "
                       "writing (as by the shell's 9>FILE) or a file name"),
            std::string::npos)
      << r.out;
  r = run_cli("fit /dev/fd/3 -o " + (d / "p.json").string() + " 3>" + (d / "w").string());
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("/dev/fd/3: descriptor 3 is open only for writing; expected one open for reading"),
            std::string::npos)
      << r.out;
  // A closed descriptor is not taken for an embedded profile's name.
  r = run_cli("predict --profile /dev/fd/7 --K 8 --V 1MiB --G 1us");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("/dev/fd/7: descriptor 7 is not open in this process"), std::string::npos) << r.out;
  // An output descriptor on an input file is that input.
  r = run_cli("fit " + s + " -o /dev/fd/3 3>>" + s);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("is also the input"), std::string::npos) << r.out;
  EXPECT_EQ(read_text(s), samples());
}

TEST(InheritedDescriptors, ReaderReadsFromTheDescriptorsOffsetAndFromASocket) {
  const fs::path d = scratch("reader");
  write_text(d / "doc", "skip:the rest");
  const int fd = ::open((d / "doc").c_str(), O_RDONLY);
  ASSERT_GE(fd, 3);
  char skip[5];
  ASSERT_EQ(::read(fd, skip, 5), 5);
  EXPECT_EQ(xstage::detail::read_whole_file("/dev/fd/" + std::to_string(fd)), "the rest");
  ::close(fd);
  // A socket cannot be reopened by name (ENXIO); its descriptor reads.
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  ASSERT_EQ(::write(sv[0], "hello", 5), 5);
  ::close(sv[0]);
  EXPECT_EQ(xstage::detail::read_whole_file("/proc/self/fd/" + std::to_string(sv[1])), "hello");
  ::close(sv[1]);
  EXPECT_EQ(error_of([] { xstage::detail::read_whole_file("/dev/fd/999"); }),
            "/dev/fd/999: descriptor 999 is not open in this process; expected a descriptor opened for reading (as "
            "by the shell's 999<FILE) or a file name");
}

TEST(InheritedDescriptors, WriterWritesThroughTheDescriptorAndLeavesItOpen) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  {
    xstage::detail::OutputFile out("/dev/fd/" + std::to_string(p[1]), "--timeline");
    out.stream() << "through the pipe\n";
    out.commit();
  }
  // The writer's duplicate is closed; the original still writes.
  ASSERT_EQ(::write(p[1], "more\n", 5), 5);
  ::close(p[1]);
  std::string got(64, '\0');
  ssize_t n, at = 0;
  while ((n = ::read(p[0], got.data() + at, got.size() - size_t(at))) > 0) at += n;
  ::close(p[0]);
  got.resize(size_t(at));
  EXPECT_EQ(got, "through the pipe\nmore\n");
  const int ro = ::open("/proc/self/status", O_RDONLY);
  EXPECT_EQ(error_of([&] { xstage::detail::check_output_path("/dev/fd/" + std::to_string(ro), "-o"); }),
            "-o /dev/fd/" + std::to_string(ro) + ": descriptor " + std::to_string(ro) +
                " is open only for reading; expected one open for writing (as by the shell's " + std::to_string(ro) +
                ">FILE)");
  ::close(ro);
}

// The names, parsed by hand (no std::regex in the library: test_layering.cpp).
TEST(InheritedDescriptors, NamesAreParsedByTheirParts) {
  using xstage::detail::own_descriptor;
  using xstage::detail::parse_descriptor_name;
  const std::string me = std::to_string(::getpid());
  EXPECT_EQ(own_descriptor("-"), 1);
  EXPECT_EQ(own_descriptor("/dev/stderr"), 2);
  EXPECT_EQ(own_descriptor("/dev/fd/7"), 7);
  EXPECT_EQ(own_descriptor("/proc/self/fd/12"), 12);
  EXPECT_EQ(own_descriptor("/proc/thread-self/fd/3"), 3);
  EXPECT_EQ(own_descriptor("/proc/" + me + "/fd/4"), 4);
  EXPECT_EQ(own_descriptor("/proc/" + me + "1/fd/4"), std::nullopt);  // another process
  EXPECT_EQ(own_descriptor("/proc/99999999999999999999999/fd/4"), std::nullopt);  // no such pid, no throw
  EXPECT_EQ(own_descriptor("/dev/fd/1234567890"), std::nullopt);  // more than 9 digits
  for (const char* bad : {"/dev/fd/", "/dev/fd/3x", "/dev/fd/-3", "/proc/self/fd/", "/proc/self/fdx/3", "/proc/me/fd/3",
                          "/proc//fd/3", "/proc/self", "/dev/fd", "dev/fd/3", "/dev/fd/3/", "/proc/self/fd/3/4"}) {
    EXPECT_EQ(parse_descriptor_name(bad), std::nullopt) << bad;
    EXPECT_EQ(own_descriptor(bad), std::nullopt) << bad;
  }
  const auto n = parse_descriptor_name("/proc/123/fd/45");
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->pid, "123");
  EXPECT_EQ(n->fd, "45");
}

TEST(DeviceInfo, DriverVersionIsTheFirstDottedNumber) {
  using xstage::first_version_number;
  EXPECT_EQ(first_version_number("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build "
                                 " (dvs-builder@U22)  Thu Oct 16\nGCC version:  gcc version 13.3.0"),
            "580.159.04");
  EXPECT_EQ(first_version_number("v 12 535.54 x"), "535.54");
  EXPECT_EQ(first_version_number("1.2.3.4"), "1.2.3");
  EXPECT_EQ(first_version_number("a12.b 7.x 8.9."), "8.9");
  EXPECT_EQ(first_version_number("x1234.5"), "1234.5");
  EXPECT_EQ(first_version_number("no version. 3."), "");
  EXPECT_EQ(first_version_number(""), "");
}
