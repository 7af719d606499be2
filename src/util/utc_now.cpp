#include "util/utc_now.hpp"

#include <ctime>

namespace xstage::detail {

std::string utc_now_iso() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);  // the reentrant form: benches may stamp from several threads
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace xstage::detail
