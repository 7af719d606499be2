#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "util/csv.hpp"
#include "xstage/error.hpp"
#include "xstage/simulator.hpp"
#include "xstage/units.hpp"

namespace xstage {

std::vector<Program> parse_schedule_csv(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  long lineno = 0;
  std::map<std::string, size_t> col;
  std::map<long, Program> by_producer;
  while (std::getline(in, line)) {
    ++lineno;
    const std::string t = detail::trim(line);
    if (t.empty() || t[0] == '#') continue;
    const std::string where = fmt::format("{}:{}", name, lineno);
    const auto f = detail::split_csv_line(line, where);
    if (col.empty()) {
      for (size_t i = 0; i < f.size(); ++i)
        if (!col.emplace(f[i], i).second)
          throw Error(fmt::format("{}: column '{}' appears twice in the header", where, f[i]));
      for (const char* r : {"producer", "kind", "amount"})
        if (!col.count(r)) throw Error(fmt::format("{}: header lacks column '{}' (need producer,kind,amount)", where, r));
      continue;
    }
    if (f.size() != col.size()) throw Error(fmt::format("{}: {} fields, but the header has {}", where, f.size(), col.size()));
    const std::string& ps = f[col["producer"]];
    char* end = nullptr;
    const long producer = std::strtol(ps.c_str(), &end, 10);
    if (ps.empty() || *end != '\0' || producer < 0)
      throw Error(fmt::format("{}: column 'producer': expected a whole number >= 0, got '{}'", where, ps));
    const std::string& kind = f[col["kind"]];
    const std::string& amount = f[col["amount"]];
    if (kind == "store")
      by_producer[producer].steps.push_back(Step::store(parse_size_bytes(amount, where + ": amount")));
    else if (kind == "compute")
      by_producer[producer].steps.push_back(Step::compute(parse_time_ns(amount, where + ": amount")));
    else
      throw Error(fmt::format("{}: column 'kind': expected 'store' or 'compute', got '{}'", where, kind));
  }
  if (by_producer.empty()) throw Error(fmt::format("{}: no schedule rows", name));
  std::vector<Program> out;
  for (auto& [id, prog] : by_producer) {
    if (id != static_cast<long>(out.size()))
      throw Error(fmt::format("{}: producers must be numbered 0..K-1; producer {} is missing", name, out.size()));
    out.push_back(std::move(prog));
  }
  return out;
}

std::vector<Program> read_schedule_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("{}: cannot open for reading", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_schedule_csv(ss.str(), path);
}

}  // namespace xstage
