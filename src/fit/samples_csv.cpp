#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "util/csv.hpp"
#include "util/input_file.hpp"
#include "xstage/limits.hpp"
#include "xstage/error.hpp"
#include "xstage/fit.hpp"

namespace xstage {
namespace {
using detail::split_csv_line_into;
using detail::trim;

double number(const std::string& text, const std::string& where, const std::string& column) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);  // a NUL inside the cell leaves `end` short: rejected
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v))
    throw Error(fmt::format("{}: column '{}': '{}' is not a finite number", where, column, text));
  return v;
}

}  // namespace

namespace {

SampleSet parse_samples(const detail::NextLine& next_line, const std::string& name) {
  std::string line;
  long lineno = 0;
  std::map<std::string, size_t> col;
  size_t ncols = 0;
  SampleSet set;
  std::vector<Sample>& out = set.samples;
  const char* required[] = {"K", "V_bytes", "gap_ns", "issue_ns"};
  // Column indices, looked up once: a probe CSV may have millions of rows.
  size_t iK = 0, iV = 0, iG = 0, iT = 0;
  std::optional<size_t> iStat, iSet, iBursts, iSteady, iComplete;
  std::string where;
  std::vector<std::string> fields;
  auto find = [&](const char* c) -> std::optional<size_t> {
    auto it = col.find(c);
    return it == col.end() ? std::nullopt : std::optional<size_t>(it->second);
  };
  while (next_line(line)) {
    ++lineno;
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    if (line[first] == '#') {  // "# key: value" metadata
      const std::string t = trim(line);
      const size_t colon = t.find(':');
      if (colon != std::string::npos && colon > 1)
        set.metadata[trim(t.substr(1, colon - 1))] = trim(t.substr(colon + 1));
      continue;
    }
    where = name;
    where += ':';
    where += std::to_string(lineno);
    split_csv_line_into(line, where, fields);
    if (col.empty()) {
      for (size_t i = 0; i < fields.size(); ++i)
        if (!col.emplace(fields[i], i).second)
          throw Error(fmt::format("{}: column '{}' appears twice in the header", where, fields[i]));
      ncols = fields.size();
      for (const char* r : required)
        if (!col.count(r))
          throw Error(fmt::format("{}: header lacks column '{}' (need K, V_bytes, gap_ns, issue_ns)", where, r));
      iK = col["K"], iV = col["V_bytes"], iG = col["gap_ns"], iT = col["issue_ns"];
      iStat = find("stat"), iSet = find("set"), iComplete = find("complete_ns");
      if (col.count("bursts") && col.count("steady_from")) iBursts = find("bursts"), iSteady = find("steady_from");
      continue;
    }
    if (fields.size() != ncols)
      throw Error(fmt::format("{}: {} fields, but the header has {}", where, fields.size(), ncols));
    if (iStat && fields[*iStat] != "run") continue;
    Sample s;
    s.line = lineno;
    s.K = number(fields[iK], where, "K");
    s.V_bytes = number(fields[iV], where, "V_bytes");
    s.gap_ns = number(fields[iG], where, "gap_ns");
    s.issue_ns = number(fields[iT], where, "issue_ns");
    if (iSet) s.set = fields[*iSet];
    if (iBursts) {
      const double b = number(fields[*iBursts], where, "bursts");
      const double f = number(fields[*iSteady], where, "steady_from");
      if (!(b >= 1 && b <= 1e9 && f >= 0 && f < b) || b != std::floor(b) || f != std::floor(f))
        throw Error(fmt::format("{}: columns 'bursts'/'steady_from': need whole numbers 0 <= steady_from < bursts "
                                "<= 1e9, got {}/{}",
                                where, fields[*iSteady], fields[*iBursts]));
      s.bursts = static_cast<long>(b);
      s.steady_from = static_cast<long>(f);
    }
    if (iComplete && !fields[*iComplete].empty()) s.complete_ns = number(fields[*iComplete], where, "complete_ns");
    if (s.K < 1 || s.K != std::floor(s.K))
      throw Error(fmt::format("{}: column 'K': expected a whole number >= 1, got {}", where, s.K));
    if (s.V_bytes <= 0) throw Error(fmt::format("{}: column 'V_bytes': expected > 0, got {}", where, s.V_bytes));
    if (s.gap_ns < 0) throw Error(fmt::format("{}: column 'gap_ns': expected >= 0, got {}", where, s.gap_ns));
    if (s.issue_ns <= 0)
      throw Error(fmt::format("{}: column 'issue_ns': expected > 0, got {}", where, s.issue_ns));
    // Beyond these no GPU run produced the row; inside them the model's
    // arithmetic stays finite (xstage/limits.hpp).
    if (s.K > kMaxProducers || s.V_bytes > kMaxBytes || s.gap_ns > kMaxTimeNs || s.issue_ns > kMaxTimeNs)
      throw Error(fmt::format("{}: K = {}, V_bytes = {}, gap_ns = {}, issue_ns = {}: expected K <= {}, V_bytes <= "
                              "{:g} and times <= {:g} ns",
                              where, s.K, s.V_bytes, s.gap_ns, s.issue_ns, kMaxProducers, kMaxBytes, kMaxTimeNs));
    out.push_back(s);
  }
  if (col.empty()) throw Error(fmt::format("{}: no header line (need K, V_bytes, gap_ns, issue_ns)", name));
  if (out.empty()) throw Error(fmt::format("{}: header but no data rows", name));
  return set;
}

}  // namespace

SampleSet parse_samples_csv(const std::string& text, const std::string& name) {
  return parse_samples(detail::lines_of(std::string_view(text)), name);
}

double predicted_issue_ns(const Profile& p, const Sample& s) {
  if (s.bursts > 0) return windowed_issue_ns(p, s.K, s.V_bytes, s.gap_ns, s.steady_from, s.bursts);
  return predict(p, s.K, s.V_bytes, s.gap_ns).t_iss_ns;
}

bool used_for_issue_fit(const Sample& s) { return s.set.empty() || s.set == "train"; }

SampleSet read_samples_csv(const std::string& path) {
  std::ifstream in = detail::open_for_reading(path);
  SampleSet set = parse_samples(detail::lines_of(in), path);
  if (in.bad()) throw Error(fmt::format("{}: read failed", path));
  return set;
}

}  // namespace xstage
