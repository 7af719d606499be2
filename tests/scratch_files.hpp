#pragma once
// Scratch folders and whole-file reads and writes for the CLI tests that
// feed the command files (tests/cpu/test_hostile_input*.cpp).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

// A new, empty folder under the temp dir, named by `prefix`, `name` and this
// process (tests of two builds may run at once).
inline std::filesystem::path scratch_dir(const std::string& prefix, const std::string& name) {
  const std::filesystem::path d =
      std::filesystem::temp_directory_path() / (prefix + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

inline void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
