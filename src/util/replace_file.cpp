#include "replace_file.hpp"

#include "output_file.hpp"

namespace xstage::detail {

void write_file_replacing(const std::string& path, const std::string& text, const std::string& what) {
  OutputFile f(path, what);
  f.stream() << text;
  f.commit();
}

void write_file_replacing(const std::string& path, const std::string& text) { write_file_replacing(path, text, "output"); }

}  // namespace xstage::detail
