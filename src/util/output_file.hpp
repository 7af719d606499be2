#pragma once
// A file named on the command line (-o, --timeline, ...), written so that it
// is either whole or untouched:
// - a regular file (or a new name) is written aside in the same folder and
//   renamed into place; through a symlink, the link's target is replaced and
//   the link kept;
// - a device or pipe (/dev/null, a FIFO) and an open descriptor's name
//   (/dev/stdout, /proc/self/fd/N) are written to directly, never replaced by
//   a regular file;
// - a folder, an empty name, a missing name under /dev or /proc, a missing,
//   read-only or not-a-folder folder, a file no one may write, or a file that
//   is also one of the command's inputs is refused with an xstage::Error
//   before anything is written, so the check can run before long work.
#include <fstream>
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

// A folder named by `what` (e.g. "-o") that the command will write files
// into: made if missing, refused unless it is a folder in which `first_file`
// can be written (check_output_path), before any long work.
void prepare_output_dir(const std::string& dir, const std::string& what, const std::string& first_file);

class OutputFile {
 public:
  // Checks the destination (check_output_path) and opens the file to write.
  OutputFile(const std::string& path, const std::string& what, const std::vector<std::string>& inputs = {});
  ~OutputFile();  // without commit(): the aside file is removed, the target untouched
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  std::ostream& stream() { return out_; }
  // Flushes, checks that every write succeeded and renames the file into place.
  void commit();

 private:
  std::string path_, what_;
  std::string target_;  // where the bytes end up (the symlink's target)
  std::string aside_;   // the temporary name; empty when writing a device directly
  std::ofstream out_;
  bool committed_ = false;
};

}  // namespace xstage::detail
