#pragma once
// One exception type for every user-facing failure: what went wrong, where,
// and what was expected. The CLI prints its message on one line and exits 2.
#include <stdexcept>
#include <string>

namespace xstage {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace xstage
