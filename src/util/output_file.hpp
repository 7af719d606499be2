#pragma once
// A file named on the command line (-o, --timeline, ...), written so that it
// is either whole or untouched:
// - a regular file (or a new name) is written aside in the same folder and
//   renamed into place; through a symlink, the link's target is replaced and
//   the link kept;
// - `-` and the names of the process's own stdout (/dev/stdout, /dev/fd/1,
//   /proc/self/fd/1) are written through the process's stdout stream, in
//   order with what the command prints (a second descriptor opened on a
//   file the shell redirected into would write at its own offset and be
//   overwritten by the buffered table); /dev/stderr likewise;
// - the names of the process's other open descriptors (/dev/fd/3 from the
//   shell's 3>FILE or >(...), /proc/self/fd/N) are written through a
//   duplicate of the descriptor, at its offset and in its mode, never
//   reopened by name (util/descriptor.hpp says why); one open only for
//   reading, or not open, is refused;
// - other devices and pipes (/dev/null, a FIFO) are written to directly,
//   never replaced by a file;
// - a folder, an empty name, a missing name under /dev, /proc or /sys, a
//   missing, read-only or not-a-folder folder, a file no one may write, a
//   file that is also one of the command's inputs, or one file named by two
//   of the command's outputs is refused with an xstage::Error before
//   anything is written, so the check can run before long work.
#include <fstream>
#include <memory>
#include <ostream>
#include <optional>
#include <string>
#include <vector>

namespace xstage::detail {

// Throws xstage::Error naming `what` (the option, e.g. "-o") and `path` when
// `path` cannot be written as described above or names one of `inputs`. It
// tries rather than reads permission bits (root writes past them; a read-only
// file system or /proc does not let anyone): it opens an existing file to
// write without changing it, and makes and removes a file beside it.
void check_output_path(const std::string& path, const std::string& what, const std::vector<std::string>& inputs = {});

// One output of a command: the path and the option that named it.
struct NamedOutput {
  std::string path, what;
};
// check_output_path for each of `outputs` (those with an empty path and an
// empty `what` are skipped: options not given), and no two of them one file
// (nor both the process's stdout). For commands with several outputs, before
// their work.
void check_outputs(const std::vector<NamedOutput>& outputs, const std::vector<std::string>& inputs = {});

// Whether two names are one file: the same file on disk, the same name once
// symlinks and `..` are resolved (files yet to be made), or the same
// descriptor (`-`, /dev/stdout, /dev/fd/1).
bool same_file(const std::string& a, const std::string& b);

// A folder named by `what` (e.g. "-o") that the command will write files
// into: made if missing, refused unless it is a folder in which `first_file`
// can be written (check_output_path), before any long work. `inputs`: the
// files the command reads (refused as the folder's `first_file`, and checked
// again for each file the command writes there).
void prepare_output_dir(const std::string& dir, const std::string& what, const std::string& first_file,
                        const std::vector<std::string>& inputs = {});

class OutputFile {
 public:
  // Checks the destination (check_output_path) and opens the file to write.
  OutputFile(const std::string& path, const std::string& what, const std::vector<std::string>& inputs = {});
  ~OutputFile();  // without commit(): the aside file is removed, the target untouched
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  std::ostream& stream() { return *out_; }
  // Flushes, checks that every write succeeded and renames the file into place.
  void commit();
  // The first half of commit(): everything written and checked, nothing
  // renamed yet (commit_all finishes every file of a set before it renames any).
  void finish();

 private:
  std::string path_, what_;
  std::string target_;  // where the bytes end up (the symlink's target)
  std::string aside_;   // the temporary name; empty when writing a device directly
  std::unique_ptr<std::ofstream> file_;  // the aside file, or a device opened by name
  std::unique_ptr<std::streambuf> descriptor_;  // an inherited descriptor's duplicate (/dev/fd/3)
  std::unique_ptr<std::ostream> own_stream_;    // the stream over descriptor_
  std::ostream* out_ = nullptr;          // file_, own_stream_, or std::cout / std::cerr
  bool finished_ = false, committed_ = false;
};

// Several files that are all written or none: each is finished (written
// aside, flushed, checked) before any is renamed into place. A failure
// before then leaves every target as it was.
void commit_all(const std::vector<OutputFile*>& files);

}  // namespace xstage::detail
