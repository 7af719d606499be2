#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "util/csv.hpp"
#include "util/input_file.hpp"
#include "xstage/core/error.hpp"
#include "xstage/core/limits.hpp"
#include "xstage/core/units.hpp"
#include "xstage/model/simulator.hpp"

namespace xstage {

namespace {

std::vector<Program> parse_schedule(const detail::NextLine& next_line, const std::string& name) {
  std::string line;
  long lineno = 0;
  std::map<std::string, size_t> col;
  std::map<long, Program> by_producer;
  while (next_line(line)) {
    ++lineno;
    const std::string t = detail::trim(line);
    if (t.empty() || t[0] == '#') continue;
    const std::string where = fmt::format("{}:{}", name, lineno);
    const auto f = detail::split_csv_line(line, where);
    if (col.empty()) {
      for (size_t i = 0; i < f.size(); ++i)
        if (!col.emplace(f[i], i).second)
          throw Error(fmt::format("{}: column '{}' appears twice in the header; expected each column once", where, f[i]));
      for (const char* r : {"producer", "kind", "amount"})
        if (!col.count(r)) throw Error(fmt::format("{}: header lacks column '{}'; expected a header naming producer, kind and amount", where, r));
      continue;
    }
    if (f.size() != col.size()) throw Error(fmt::format("{}: {} fields, but the header has {}; expected {} comma-separated fields", where, f.size(),
                            col.size(), col.size()));
    const std::string& ps = f[col["producer"]];
    char* end = nullptr;
    errno = 0;
    const long producer = std::strtol(ps.c_str(), &end, 10);
    // `end` short of the cell's end: a NUL byte or other text after the digits.
    if (ps.empty() || end != ps.c_str() + ps.size() || errno == ERANGE || producer < 0 || producer >= kMaxProducers)
      throw Error(fmt::format("{}: column 'producer': expected a whole number in [0, {}), got '{}'", where,
                              kMaxProducers, ps));
    const std::string& kind = f[col["kind"]];
    const std::string& amount = f[col["amount"]];
    Program& prog = by_producer[producer];
    if (kind == "store") {
      const double bytes = parse_size_bytes(amount, where + ": amount");
      if (bytes > kMaxBytes)
        throw Error(fmt::format("{}: amount: '{}'; expected at most {:g} bytes, the most a schedule may store", where,
                                amount, kMaxBytes));
      prog.steps.push_back(Step::store(bytes));
    } else if (kind == "compute") {
      const double ns = parse_time_ns(amount, where + ": amount");
      if (ns > kMaxTimeNs)
        throw Error(fmt::format("{}: amount: '{}'; expected at most {:g} ns, the longest a schedule may run", where,
                                amount, kMaxTimeNs));
      prog.steps.push_back(Step::compute(ns));
    } else {
      throw Error(fmt::format("{}: column 'kind': expected 'store' or 'compute', got '{}'", where, kind));
    }
  }
  if (by_producer.empty()) throw Error(fmt::format("{}: no schedule rows; expected a header naming producer, kind and amount, then rows", name));
  std::vector<Program> out;
  for (auto& [id, prog] : by_producer) {
    if (id != static_cast<long>(out.size()))
      throw Error(fmt::format("{}: producer {} is missing; expected producers numbered 0..K-1", name, out.size()));
    out.push_back(std::move(prog));
  }
  return out;
}

}  // namespace

std::vector<Program> parse_schedule_csv(const std::string& text, const std::string& name) {
  return parse_schedule(detail::lines_of(std::string_view(text)), name);
}

std::vector<Program> read_schedule_csv(const std::string& path) {
  // Read whole under the document cap: every row becomes a step held in
  // memory, so the file's size bounds the schedule's.
  const std::string text = detail::read_whole_file(path, false, detail::kMaxDocumentBytes, "a schedule CSV");
  return parse_schedule(detail::lines_of(std::string_view(text)), path);
}

}  // namespace xstage
