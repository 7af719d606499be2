#pragma once
// Sizes and times written the way people write them.
//   sizes: "4096", "4e6", "64KiB", "2MiB", "1GiB", "1.5MB" (1000-based), and the
//          nccl-tests shorthand "64K", "2M", "1G" (1024-based). Plain number = bytes.
//   times: "250", "250ns", "20us", "20µs", "1.5ms", "2s". Plain number = ns.
#include <string>
#include <string_view>

namespace xstage {

// Throws xstage::Error naming `what` (e.g. "--V") when the text is malformed,
// negative, zero (unless allow_zero) or not finite.
double parse_size_bytes(std::string_view text, std::string_view what = "size", bool allow_zero = false);
double parse_time_ns(std::string_view text, std::string_view what = "time", bool allow_zero = true);

// Human-readable forms for tables: "2.00 MiB", "20.0 us", "52.1 GB/s".
std::string format_bytes(double bytes);
std::string format_ns(double ns);
std::string format_rate(double bytes_per_s);

}  // namespace xstage
