#pragma once
// A progress line on stderr for work that may run longer than a second or
// two: silent for short runs (tests, quick commands), then at most one line a
// second, so a long run is visibly alive without flooding a log.
#include <chrono>
#include <string>

namespace xstage::cli {

class ProgressLine {
 public:
  explicit ProgressLine(std::string what);
  void update(double fraction_done);               // 0..1
  void update(const std::string& stage_text);      // e.g. "bootstrap 10/40"
  void done();                                     // a last line, if any was printed

 private:
  void print(const std::string& text);
  std::string what_;
  std::chrono::steady_clock::time_point start_, last_;
  bool printed_ = false;
};

}  // namespace xstage::cli
