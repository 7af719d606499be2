#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "util/csv.hpp"
#include "xstage/error.hpp"
#include "xstage/fit.hpp"

namespace xstage {
namespace {
using detail::split_csv_line;
using detail::trim;

double number(const std::string& text, const std::string& where, const std::string& column) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v))
    throw Error(fmt::format("{}: column '{}': '{}' is not a finite number", where, column, text));
  return v;
}

}  // namespace

SampleSet parse_samples_csv(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  long lineno = 0;
  std::map<std::string, size_t> col;
  size_t ncols = 0;
  SampleSet set;
  std::vector<Sample>& out = set.samples;
  const char* required[] = {"K", "V_bytes", "gap_ns", "issue_ns"};
  while (std::getline(in, line)) {
    ++lineno;
    const std::string t = trim(line);
    if (t.empty()) continue;
    if (t[0] == '#') {  // "# key: value" metadata
      const size_t colon = t.find(':');
      if (colon != std::string::npos && colon > 1)
        set.metadata[trim(t.substr(1, colon - 1))] = trim(t.substr(colon + 1));
      continue;
    }
    const std::string where = fmt::format("{}:{}", name, lineno);
    auto fields = split_csv_line(line, where);
    if (col.empty()) {
      for (size_t i = 0; i < fields.size(); ++i)
        if (!col.emplace(fields[i], i).second)
          throw Error(fmt::format("{}: column '{}' appears twice in the header", where, fields[i]));
      ncols = fields.size();
      for (const char* r : required)
        if (!col.count(r))
          throw Error(fmt::format("{}: header lacks column '{}' (need K, V_bytes, gap_ns, issue_ns)", where, r));
      continue;
    }
    if (fields.size() != ncols)
      throw Error(fmt::format("{}: {} fields, but the header has {}", where, fields.size(), ncols));
    if (col.count("stat") && fields[col["stat"]] != "run") continue;
    Sample s;
    s.line = lineno;
    s.K = number(fields[col["K"]], where, "K");
    s.V_bytes = number(fields[col["V_bytes"]], where, "V_bytes");
    s.gap_ns = number(fields[col["gap_ns"]], where, "gap_ns");
    s.issue_ns = number(fields[col["issue_ns"]], where, "issue_ns");
    if (col.count("set")) s.set = fields[col["set"]];
    if (col.count("bursts") && col.count("steady_from")) {
      const double b = number(fields[col["bursts"]], where, "bursts");
      const double f = number(fields[col["steady_from"]], where, "steady_from");
      if (!(b >= 1 && b <= 1e9 && f >= 0 && f < b) || b != std::floor(b) || f != std::floor(f))
        throw Error(fmt::format("{}: columns 'bursts'/'steady_from': need whole numbers 0 <= steady_from < bursts "
                                "<= 1e9, got {}/{}",
                                where, fields[col["steady_from"]], fields[col["bursts"]]));
      s.bursts = static_cast<long>(b);
      s.steady_from = static_cast<long>(f);
    }
    if (col.count("complete_ns") && !fields[col["complete_ns"]].empty())
      s.complete_ns = number(fields[col["complete_ns"]], where, "complete_ns");
    if (s.K < 1 || s.K != std::floor(s.K))
      throw Error(fmt::format("{}: column 'K': expected a whole number >= 1, got {}", where, s.K));
    if (s.V_bytes <= 0) throw Error(fmt::format("{}: column 'V_bytes': expected > 0, got {}", where, s.V_bytes));
    if (s.gap_ns < 0) throw Error(fmt::format("{}: column 'gap_ns': expected >= 0, got {}", where, s.gap_ns));
    if (s.issue_ns <= 0)
      throw Error(fmt::format("{}: column 'issue_ns': expected > 0, got {}", where, s.issue_ns));
    out.push_back(s);
  }
  if (col.empty()) throw Error(fmt::format("{}: no header line (need K, V_bytes, gap_ns, issue_ns)", name));
  if (out.empty()) throw Error(fmt::format("{}: header but no data rows", name));
  return set;
}

double predicted_issue_ns(const Profile& p, const Sample& s) {
  if (s.bursts > 0) return windowed_issue_ns(p, s.K, s.V_bytes, s.gap_ns, s.steady_from, s.bursts);
  return predict(p, s.K, s.V_bytes, s.gap_ns).t_iss_ns;
}

bool used_for_issue_fit(const Sample& s) { return s.set.empty() || s.set == "train"; }

SampleSet read_samples_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("{}: cannot open for reading", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_samples_csv(ss.str(), path);
}

}  // namespace xstage
