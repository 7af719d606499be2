#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <unordered_map>

#include <fmt/format.h>

#include "util/csv.hpp"
#include "util/input_file.hpp"
#include "xstage/core/error.hpp"
#include "xstage/core/limits.hpp"
#include "xstage/model/fit.hpp"

namespace xstage {

// ---- Tally: values added one by one gather in `pending_`; once there are
// a quarter as many as merged ones (so that each merge is paid for by the
// values it takes in), they are sorted and merged into `sorted_`.

void Tally::add(double value, double count) {
  if (count == 1) {
    pending_.push_back(value);
  } else {
    Tally t;
    t.sorted_.push_back({value, count});
    t.count_ = count;
    add(t);
    return;
  }
  count_ += 1;
  if (pending_.size() >= std::max<size_t>(4096, sorted_.size() / 4)) merge_pending();
}

namespace {
// Merges two sorted lists of distinct values, adding the counts of equal ones.
std::vector<Tally::Entry> merged(const std::vector<Tally::Entry>& a, const std::vector<Tally::Entry>& b) {
  std::vector<Tally::Entry> out;
  out.reserve(a.size() + b.size());
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (j == b.size() || (i < a.size() && a[i].value < b[j].value)) {
      out.push_back(a[i++]);
    } else if (i == a.size() || b[j].value < a[i].value) {
      out.push_back(b[j++]);
    } else {
      out.push_back({a[i].value, a[i].count + b[j].count});
      ++i, ++j;
    }
  }
  return out;
}
}  // namespace

void Tally::merge_pending() {
  if (pending_.empty()) return;
  std::sort(pending_.begin(), pending_.end());
  std::vector<Entry> runs;
  for (double v : pending_) {
    if (!runs.empty() && runs.back().value == v)
      runs.back().count += 1;
    else
      runs.push_back({v, 1});
  }
  pending_.clear();
  pending_.shrink_to_fit();
  sorted_ = sorted_.empty() ? std::move(runs) : merged(sorted_, runs);
}

void Tally::add(const Tally& other) {
  if (other.empty()) return;
  if (!other.pending_.empty()) throw std::logic_error("Tally::add: the other tally is not finished");
  merge_pending();
  sorted_ = merged(sorted_, other.sorted_);
  count_ += other.count_;
}

void Tally::finish() {
  merge_pending();
  sorted_.shrink_to_fit();
}

const std::vector<Tally::Entry>& Tally::entries() const {
  if (!pending_.empty()) throw std::logic_error("Tally::entries before finish()");
  return sorted_;
}

namespace {

// The identity of a point: rows with the same K, V, G, window and set.
struct PointKey {
  double K, V, G;
  long bursts, steady_from;
  size_t set;  // index into the set names seen
  bool operator==(const PointKey&) const = default;
};

struct PointKeyHash {
  size_t operator()(const PointKey& k) const {
    size_t h = 0;
    auto mix = [&](uint64_t v) { h ^= std::hash<uint64_t>()(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
    for (double d : {k.K, k.V, k.G}) {
      uint64_t bits;
      std::memcpy(&bits, &d, sizeof bits);
      mix(bits);
    }
    mix(static_cast<uint64_t>(k.bursts));
    mix(static_cast<uint64_t>(k.steady_from));
    mix(k.set);
    return h;
  }
};

// Gathers rows into points as they are read.
class PointBuilder {
 public:
  explicit PointBuilder(std::vector<SamplePoint>& points) : points_(points) {}

  SamplePoint& point(double K, double V, double G, long bursts, long steady_from, std::string_view set, long line) {
    size_t set_id = 0;
    while (set_id < sets_.size() && sets_[set_id] != set) ++set_id;
    if (set_id == sets_.size()) sets_.emplace_back(set);
    // +0.0: a gap of -0 is the same point as a gap of 0.
    const PointKey key{K, V, G + 0.0, bursts, steady_from, set_id};
    auto [it, fresh] = index_.emplace(key, points_.size());
    if (fresh) {
      SamplePoint p;
      p.K = K, p.V_bytes = V, p.gap_ns = G + 0.0, p.bursts = bursts, p.steady_from = steady_from;
      p.set = std::string(set);
      p.line = line;
      points_.push_back(std::move(p));
    }
    return points_[it->second];
  }

  void finish() {
    for (SamplePoint& p : points_) {
      p.issue_ns.finish();
      p.complete_ns.finish();
    }
  }

 private:
  std::vector<SamplePoint>& points_;
  std::vector<std::string> sets_;
  std::unordered_map<PointKey, size_t, PointKeyHash> index_;
};

// The rows of a samples CSV, one at a time, into points. `progress`: every
// 64 Ki rows, with the bytes read so far.
SampleSet parse_samples(detail::LineReader& lines, const std::string& name,
                        const std::function<void(uint64_t bytes)>& progress) {
  std::string_view line;
  long lineno = 0;
  std::map<std::string, size_t, std::less<>> col;
  size_t ncols = 0;
  SampleSet set;
  PointBuilder builder(set.points);
  const char* required[] = {"K", "V_bytes", "gap_ns", "issue_ns"};
  // Column indices, looked up once: a probe CSV may have millions of rows.
  size_t iK = 0, iV = 0, iG = 0, iT = 0;
  std::optional<size_t> iStat, iSet, iBursts, iSteady, iComplete;
  std::vector<std::string_view> fields;
  std::vector<std::string> storage;
  // Where an error is, built only for the error message: the file and line,
  // and the column by number and header name, as an editor shows them.
  auto where = [&] { return fmt::format("{}:{}", name, lineno); };
  auto at = [&](size_t column) {
    auto it = std::find_if(col.begin(), col.end(), [&](const auto& c) { return c.second == column; });
    return fmt::format("{}:{}: column {} '{}'", name, lineno, column + 1, it == col.end() ? "?" : it->first);
  };
  auto find = [&](const char* c) -> std::optional<size_t> {
    auto it = col.find(c);
    return it == col.end() ? std::nullopt : std::optional<size_t>(it->second);
  };
  auto number = [&](size_t column, const char* expected) {
    double v = 0;
    if (!detail::parse_finite(fields[column], v))
      throw Error(fmt::format("{}: '{}' is not a finite number; expected {}", at(column), fields[column], expected));
    return v;
  };
  while (lines.next(line)) {
    ++lineno;
    if (progress && (lineno & 0xffff) == 0) progress(lines.bytes_read());
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string_view::npos) continue;
    if (line[first] == '#') {  // "# key: value" metadata
      const std::string t = detail::trim(std::string(line));
      const size_t colon = t.find(':');
      if (colon != std::string::npos && colon > 1)
        set.metadata[detail::trim(t.substr(1, colon - 1))] = detail::trim(t.substr(colon + 1));
      continue;
    }
    detail::split_csv_views(line, where, fields, storage);
    if (col.empty()) {
      for (size_t i = 0; i < fields.size(); ++i)
        if (!col.emplace(std::string(fields[i]), i).second)
          throw Error(fmt::format("{}: column {} '{}' appears twice in the header (first as column {}); expected each "
                                  "column once",
                                  where(), i + 1, fields[i], col.find(fields[i])->second + 1));
      ncols = fields.size();
      set.header.assign(fields.begin(), fields.end());
      for (const char* r : required)
        if (!col.count(r))
          throw Error(fmt::format("{}: header lacks column '{}'; expected a header naming K, V_bytes, gap_ns and "
                                  "issue_ns",
                                  where(), r));
      iK = col.find("K")->second, iV = col.find("V_bytes")->second, iG = col.find("gap_ns")->second;
      iT = col.find("issue_ns")->second;
      iStat = find("stat"), iSet = find("set"), iComplete = find("complete_ns");
      if (col.count("bursts") && col.count("steady_from")) iBursts = find("bursts"), iSteady = find("steady_from");
      continue;
    }
    if (fields.size() != ncols)
      throw Error(fmt::format("{}: {} fields, but the header has {}; expected {} comma-separated fields", where(),
                              fields.size(), ncols, ncols));
    if (iStat && fields[*iStat] != "run") continue;
    const double K = number(iK, "a whole number of producers");
    const double V = number(iV, "a number of bytes");
    const double G = number(iG, "a number of nanoseconds");
    const double T = number(iT, "a number of nanoseconds");
    long bursts = 0, steady_from = 0;
    if (iBursts) {
      const double b = number(*iBursts, "a whole number of bursts");
      const double f = number(*iSteady, "a whole number of bursts");
      if (!(b >= 1 && b <= 1e9) || b != std::floor(b))
        throw Error(fmt::format("{}: {}; expected a whole number of bursts from 1 to 1e9", at(*iBursts),
                                fields[*iBursts]));
      if (!(f >= 0 && f < b) || f != std::floor(f))
        throw Error(fmt::format("{}: {}; expected a whole number from 0 to bursts - 1 = {:g}", at(*iSteady),
                                fields[*iSteady], b - 1));
      bursts = static_cast<long>(b);
      steady_from = static_cast<long>(f);
    }
    std::optional<double> complete;
    if (iComplete && !fields[*iComplete].empty()) complete = number(*iComplete, "a number of nanoseconds or nothing");
    if (K < 1 || K != std::floor(K)) throw Error(fmt::format("{}: expected a whole number >= 1, got {}", at(iK), K));
    // A row of a real run stores at least a byte and takes at least a
    // picosecond: 1e-300 would pass "> 0" and print a 300-digit error.
    if (!(V >= 1)) throw Error(fmt::format("{}: {} bytes; expected at least 1 byte", at(iV), V));
    if (G < 0) throw Error(fmt::format("{}: expected >= 0, got {}", at(iG), G));
    if (!(T >= 1e-3)) throw Error(fmt::format("{}: {} ns; expected at least 0.001 ns", at(iT), T));
    // Beyond these no GPU run produced the row; inside them the model's
    // arithmetic stays finite (xstage/core/limits.hpp).
    if (K > kMaxProducers) throw Error(fmt::format("{}: {}; expected at most {}", at(iK), K, kMaxProducers));
    if (V > kMaxBytes) throw Error(fmt::format("{}: {:g} bytes; expected at most {:g}", at(iV), V, kMaxBytes));
    for (const auto& [column, value] : {std::pair{iG, G}, std::pair{iT, T}})
      if (value > kMaxTimeNs)
        throw Error(fmt::format("{}: {:g} ns; expected at most {:g} ns", at(column), value, kMaxTimeNs));
    SamplePoint& p = builder.point(K, V, G, bursts, steady_from, iSet ? fields[*iSet] : std::string_view(), lineno);
    p.issue_ns.add(T);
    if (complete) p.complete_ns.add(*complete);
    ++set.rows;
  }
  if (col.empty())
    throw Error(fmt::format("{}: no header line; expected a header naming K, V_bytes, gap_ns and issue_ns", name));
  if (set.rows == 0)
    throw Error(fmt::format("{}: header but no data rows{}; expected at least one row", name,
                            iStat ? " whose stat is 'run'" : ""));
  builder.finish();
  return set;
}

}  // namespace

std::vector<SamplePoint> group_samples(const std::vector<Sample>& samples) {
  std::vector<SamplePoint> points;
  PointBuilder builder(points);
  for (const Sample& s : samples) {
    SamplePoint& p = builder.point(s.K, s.V_bytes, s.gap_ns, s.bursts, s.steady_from, s.set, s.line);
    p.issue_ns.add(s.issue_ns);
    if (s.complete_ns >= 0) p.complete_ns.add(s.complete_ns);
  }
  builder.finish();
  return points;
}

SampleSet parse_samples_csv(const std::string& text, const std::string& name) {
  detail::LineReader lines{std::string_view(text), name};
  return parse_samples(lines, name, {});
}

namespace {
double predicted(const Profile& p, double K, double V, double G, long bursts, long steady_from) {
  if (bursts > 0) return windowed_issue_ns(p, K, V, G, steady_from, bursts);
  return predict(p, K, V, G).t_iss_ns;
}
}  // namespace

double predicted_issue_ns(const Profile& p, const Sample& s) {
  return predicted(p, s.K, s.V_bytes, s.gap_ns, s.bursts, s.steady_from);
}

double predicted_issue_ns(const Profile& p, const SamplePoint& s) {
  return predicted(p, s.K, s.V_bytes, s.gap_ns, s.bursts, s.steady_from);
}

bool used_for_issue_fit(const std::string& set) { return set.empty() || set == "train"; }

SampleSet read_samples_csv(const std::string& path, const std::function<void(double fraction)>& progress) {
  const std::unique_ptr<std::istream> stream = detail::open_for_reading(path, /*binary=*/true);
  std::istream& in = *stream;
  std::error_code ec;
  const double size = std::filesystem::is_regular_file(path, ec) ? double(std::filesystem::file_size(path, ec)) : 0;
  detail::LineReader lines(in, path);
  std::function<void(uint64_t)> report;
  if (progress && size > 0) report = [&](uint64_t bytes) { progress(std::min(1.0, double(bytes) / size)); };
  SampleSet set = parse_samples(lines, path, report);
  if (in.bad()) throw Error(fmt::format("{}: read failed; expected a file or stream that can be read to its end", path));
  return set;
}

}  // namespace xstage
