#include "progress.hpp"

#include <cstdio>
#include <iostream>

#include <fmt/format.h>

namespace xstage::cli {

namespace {
constexpr auto kQuiet = std::chrono::milliseconds(1500);  // shorter runs print nothing
constexpr auto kEvery = std::chrono::seconds(1);
}  // namespace

ProgressLine::ProgressLine(std::string what)
    : what_(std::move(what)), start_(std::chrono::steady_clock::now()), last_(start_) {}

void ProgressLine::print(const std::string& text) {
  const auto now = std::chrono::steady_clock::now();
  if (now - start_ < kQuiet || (printed_ && now - last_ < kEvery)) return;
  last_ = now;
  printed_ = true;
  std::cout.flush();
  const double s = std::chrono::duration<double>(now - start_).count();
  std::fprintf(stderr, "%s: %s (%.0f s)\n", what_.c_str(), text.c_str(), s);
}

void ProgressLine::update(double fraction_done) { print(fmt::format("{:.0f}% done", 100 * fraction_done)); }

void ProgressLine::update(const std::string& stage_text) { print(stage_text); }

void ProgressLine::done() {
  if (!printed_) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(stderr, "%s: done in %.1f s\n", what_.c_str(), s);
}

}  // namespace xstage::cli
