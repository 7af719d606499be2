#pragma once
// The one way a file named on the command line (or inside a report) is read.
// Every input is a regular file or a stream (a pipe, a FIFO, /dev/stdin
// redirected from one), read incrementally and bounded: a document read whole
// has a size cap, checked before reading where the size is known and while
// reading where it is not; a CSV streamed line by line has a cap on a line.
// A folder, a device (/dev/zero, /dev/urandom, a terminal) or a socket is
// refused before anything is read: none of them is a file of data, and
// /dev/zero would otherwise be read until memory ran out.
// /dev/stdin, /dev/fd/N and /proc/self/fd/N are read through the descriptor
// the process inherited (util/descriptor.hpp), from where it stands; a
// socket is accepted there too, as the stream it is.
#include <cstdint>
#include <istream>
#include <memory>
#include <string>

namespace xstage::detail {

// A JSON document (profile, report, recorded sweep, probe summary) or a
// schedule CSV, read whole: 64 MiB, 64 times the largest committed one.
// Parsed, such a document takes up to about 16 times its size in memory.
inline constexpr uint64_t kMaxDocumentBytes = uint64_t(64) << 20;
// A .npy array (attn --q, moe --x, ...): 16 GiB, far beyond one input of the
// CLI's benchmarks; read whole and converted, it takes twice that.
inline constexpr uint64_t kMaxArrayBytes = uint64_t(16) << 30;
// One line of a CSV read as a stream (the samples of fit and validate,
// which may have millions of rows and have no total cap): 1 MiB.
inline constexpr uint64_t kMaxLineBytes = uint64_t(1) << 20;

// Throws xstage::Error "<path>: ...; expected ..." unless `path` names a
// regular file or a pipe/FIFO that exists (following symlinks), or one of
// this process's descriptors open for reading on a file, a pipe or a socket.
void check_input_path(const std::string& path);

// Whether `path` names something on disk (a file, a folder, a device) at
// all: load_profile falls back to the embedded profiles only where it does
// not. A descriptor's name counts as something, open or not: a closed
// /dev/fd/3 is an error, not a profile's name.
bool input_exists(const std::string& path);

// Opens an input for streaming after check_input_path: the file, or a
// duplicate of the descriptor its name names. Throws xstage::Error
// "<path>: cannot open for reading: <reason>; expected ...".
std::unique_ptr<std::istream> open_for_reading(const std::string& path, bool binary = false);

// The whole input, at most `max_bytes` (a larger regular file is refused
// before it is read, a stream as soon as it passes the cap). `kind` names
// what the file was expected to be in the error ("a profile JSON").
std::string read_whole_file(const std::string& path, bool binary = false, uint64_t max_bytes = kMaxDocumentBytes,
                            const std::string& kind = "a JSON document");

// "64 MiB", "16 GiB": a cap as people read it.
std::string cap_text(uint64_t bytes);

}  // namespace xstage::detail
