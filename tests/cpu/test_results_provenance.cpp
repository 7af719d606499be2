// Every result file under results/ names the commit that made it (issue 37:
// docs quoted files whose commit was "unknown" or named by hand in the wrong
// row of results/README.md). What counts as naming it:
//
// - A JSON record (any *.json): a commit string at one of the keys its
//   writers use: "commit" at the top (the benches, xstage's records),
//   "provenance.commit" (profiles), "measured.commit" (xstage validate's
//   validation-*.json), "fitted_by_commit" (probe-validation.json), or
//   "commit" in every entry of "sources" (files merged by
//   bench/plot_ulysses.py). The value is 7-40 lowercase hex digits, with
//   "-dirty" where the device snapshot held uncommitted changes (the docs say
//   which commit the tree became). "unknown", "" or a number do not count.
// - Any other file (CSV, log, text, scripts; README.md, COMMITS and images
//   aside): a hash on a line that says "commit" in its first 40 lines (CSV
//   headers, env files), a hash in its path below results/ (tests-05987eb/,
//   moe-bench-60de2a8.log), a line "<file name> <hash>" in the COMMITS file
//   of its folder, or a hash in a README.md or *env*.txt of its folder or of
//   a folder above it, up to results/<machine>/<topic>/.
//
// In text a hash is a word of 7-40 hex digits with at least one digit and one
// letter a-f, so that sizes (1047552) and words do not pass for one; a
// commit whose short hash is all digits has to be named longer. The test
// checks that a commit is named, not that it is the right one: that is what
// results/README.md and the folders' READMEs are for.
//
// Every results/... path that README.md, docs/ and bench/README.md name (and
// the h200.../ paths of results/README.md, written relative to results/)
// exists: older runs move under <topic>/archive/ (issue 38), and a link left
// behind would point at nothing. {a,b} and * in a path are expanded as the
// shell would; a path with a <placeholder> is a pattern, not a file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool is_hex_lower(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// A JSON commit value: the whole string is the hash (plus -dirty).
bool is_commit_value(const std::string& s) {
  std::string h = s;
  const std::string dirty = "-dirty";
  if (h.size() > dirty.size() && h.compare(h.size() - dirty.size(), dirty.size(), dirty) == 0)
    h.resize(h.size() - dirty.size());
  return h.size() >= 7 && h.size() <= 40 && std::all_of(h.begin(), h.end(), is_hex_lower);
}

// A hash inside text: a maximal alphanumeric word of hex digits, with a digit
// and a letter in it.
bool names_hash(const std::string& text) {
  const auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  for (size_t i = 0; i < text.size();) {
    if (!alnum(text[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && alnum(text[j])) ++j;
    const std::string w = text.substr(i, j - i);
    if (w.size() >= 7 && w.size() <= 40 && std::all_of(w.begin(), w.end(), is_hex_lower) &&
        std::any_of(w.begin(), w.end(), [](char c) { return c >= 'a'; }) &&
        std::any_of(w.begin(), w.end(), [](char c) { return c <= '9'; }))
      return true;
    i = j;
  }
  return false;
}

// Where a record keeps its commit; nullopt when it names none. The reason
// goes into the failure message.
std::optional<std::string> record_commit(const json& doc, std::string* why) {
  const auto str_at = [](const json& o, const char* key) -> std::optional<std::string> {
    if (!o.is_object()) return std::nullopt;
    const auto it = o.find(key);
    if (it == o.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  if (!doc.is_object()) {
    *why = "not a JSON object";
    return std::nullopt;
  }
  std::optional<std::string> c = str_at(doc, "commit");
  if (!c && doc.contains("provenance")) c = str_at(doc["provenance"], "commit");
  if (!c && doc.contains("measured")) c = str_at(doc["measured"], "commit");
  if (!c) c = str_at(doc, "fitted_by_commit");
  if (!c && doc.contains("sources") && doc["sources"].is_array() && !doc["sources"].empty()) {
    for (const json& s : doc["sources"]) {
      const auto sc = str_at(s, "commit");
      if (!sc || !is_commit_value(*sc)) {
        *why = "a source without a commit";
        return std::nullopt;
      }
      c = c ? c : sc;
    }
  }
  if (!c) {
    *why = "no commit, provenance.commit, measured.commit, fitted_by_commit or sources[].commit";
    return std::nullopt;
  }
  if (!is_commit_value(*c)) {
    *why = "commit \"" + *c + "\" is no 7-40 digit hex hash";
    return std::nullopt;
  }
  return c;
}

std::string read_head(const fs::path& p, size_t bytes) {
  std::ifstream in(p, std::ios::binary);
  std::string s(bytes, '\0');
  in.read(s.data(), static_cast<std::streamsize>(bytes));
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool head_names_commit(const fs::path& p) {
  const std::string head = read_head(p, 16384);
  if (head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x1f && static_cast<unsigned char>(head[1]) == 0x8b)
    return false;  // gzip: only its path or its folder can name the commit
  std::istringstream in(head);
  std::string line;
  for (int n = 0; n < 40 && std::getline(in, line); ++n) {
    std::string lower = line;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    if (lower.find("commit") != std::string::npos && names_hash(line)) return true;
  }
  return false;
}

bool is_provenance_file(const fs::path& p) {
  const std::string n = p.filename().string();
  return n == "README.md" || n == "COMMITS";
}

bool is_image(const fs::path& p) {
  const std::string e = p.extension().string();
  return e == ".png" || e == ".svg" || e == ".jpg";
}

bool is_path_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || std::string_view("_.,{}*/-").find(c) != std::string_view::npos;
}

// a{b,c}d -> abd, acd (nested and repeated groups too).
std::vector<std::string> expand_braces(const std::string& p) {
  const size_t open = p.find('{');
  const size_t close = open == std::string::npos ? open : p.find('}', open);
  if (close == std::string::npos) return {p};
  const std::string alts = p.substr(open + 1, close - open - 1);
  std::vector<std::string> out;
  for (size_t from = 0;;) {
    const size_t comma = alts.find(',', from);
    const std::string alt = alts.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
    for (auto& q : expand_braces(p.substr(0, open) + alt + p.substr(close + 1))) out.push_back(std::move(q));
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  return out;
}

bool wildcard_match(std::string_view pat, std::string_view s) {  // '*' only
  if (pat.empty()) return s.empty();
  if (pat[0] == '*') {
    for (size_t i = 0; i <= s.size(); ++i)
      if (wildcard_match(pat.substr(1), s.substr(i))) return true;
    return false;
  }
  return !s.empty() && pat[0] == s[0] && wildcard_match(pat.substr(1), s.substr(1));
}

// Whether `rel` (components may hold '*') names at least one file or folder under root.
bool path_exists(const fs::path& root, const std::string& rel) {
  std::vector<fs::path> at{root};
  std::istringstream parts(rel);
  std::string part;
  while (std::getline(parts, part, '/')) {
    if (part.empty()) continue;
    std::vector<fs::path> next;
    for (const fs::path& d : at) {
      if (part.find('*') == std::string::npos) {
        if (fs::exists(d / part)) next.push_back(d / part);
      } else if (fs::is_directory(d)) {
        for (const auto& e : fs::directory_iterator(d))
          if (wildcard_match(part, e.path().filename().string())) next.push_back(e.path());
      }
    }
    if (next.empty()) return false;
    at = std::move(next);
  }
  return true;
}

// The paths below results/ that `text` names: each "results/..." and, with
// `bare` (results/README.md), each "h200.../..."; placeholders left out.
std::vector<std::string> named_results_paths(const std::string& text, bool bare) {
  std::vector<std::string> out;
  const auto take = [&](size_t start, size_t skip) {
    if (start > 0 && is_path_char(text[start - 1])) return;  // inside a longer path or word
    size_t end = start + skip;
    while (end < text.size() && is_path_char(text[end])) ++end;
    if (end < text.size() && text[end] == '<') return;  // results/<machine>/...: a pattern
    std::string rel = text.substr(start + skip, end - start - skip);
    while (!rel.empty() && (rel.back() == '.' || rel.back() == ',')) rel.pop_back();  // the sentence's
    out.push_back(rel);
  };
  for (size_t at = text.find("results/"); at != std::string::npos; at = text.find("results/", at + 1)) take(at, 8);
  if (bare)
    for (size_t at = text.find("h200"); at != std::string::npos; at = text.find("h200", at + 1)) {
      size_t slash = at + 4;
      if (slash < text.size() && text[slash] == 'x')
        while (++slash < text.size() && std::isdigit(static_cast<unsigned char>(text[slash]))) {
        }
      if (slash < text.size() && text[slash] == '/') take(at, 0);
    }
  return out;
}

// The named paths of `text` that exist nowhere under results/.
std::vector<std::string> missing_results_paths(const fs::path& results, const std::string& text, bool bare) {
  std::vector<std::string> missing;
  for (const std::string& rel : named_results_paths(text, bare))
    for (const std::string& p : expand_braces(rel))
      if (!path_exists(results, p)) missing.push_back(p);
  return missing;
}

class Provenance {
 public:
  explicit Provenance(fs::path results) : results_(std::move(results)) {}

  // Whether a non-JSON file names its commit; `p` lies under results_.
  bool names_commit(const fs::path& p) {
    if (head_names_commit(p)) return true;
    for (const auto& part : fs::relative(p, results_))
      if (names_hash(part.string())) return true;
    if (listed_in_commits(p)) return true;
    // README.md or env files of its folder and the folders above it, down to
    // results/<machine>/<topic>/ (results/README.md is the index, not a
    // record: it would cover everything).
    for (fs::path d = p.parent_path();; d = d.parent_path()) {
      const fs::path rel = fs::relative(d, results_);
      if (std::distance(rel.begin(), rel.end()) < 2) return false;
      if (folder_names_commit(d)) return true;
    }
  }

 private:
  bool listed_in_commits(const fs::path& p) {
    const fs::path list = p.parent_path() / "COMMITS";
    if (!fs::exists(list)) return false;
    std::istringstream in(read_all(list));
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream w(line);
      std::string name, commit;
      if (w >> name >> commit && name == p.filename().string() && is_commit_value(commit)) return true;
    }
    return false;
  }

  bool folder_names_commit(const fs::path& d) {
    const auto it = folders_.find(d.string());
    if (it != folders_.end()) return it->second;
    bool named = false;
    for (const auto& e : fs::directory_iterator(d)) {
      if (!e.is_regular_file()) continue;
      const std::string n = e.path().filename().string();
      const bool env = n.find("env") != std::string::npos && e.path().extension() == ".txt";
      if ((n == "README.md" || env) && names_hash(read_all(e.path()))) {
        named = true;
        break;
      }
    }
    folders_[d.string()] = named;
    return named;
  }

  fs::path results_;
  std::map<std::string, bool> folders_;
};

TEST(ResultsProvenance, TheCheckRefusesRecordsWithoutACommit) {
  std::string why;
  EXPECT_FALSE(record_commit(json::parse(R"({"date": "2026-12-01", "rows": []})"), &why));
  EXPECT_FALSE(record_commit(json::parse(R"({"commit": "unknown"})"), &why));
  EXPECT_NE(why.find("unknown"), std::string::npos) << why;
  EXPECT_FALSE(record_commit(json::parse(R"({"commit": ""})"), &why));
  EXPECT_FALSE(record_commit(json::parse(R"({"commit": 60})"), &why));
  EXPECT_FALSE(record_commit(json::parse(R"({"commit": "60de2a"})"), &why));  // 6 digits: too short
  EXPECT_FALSE(record_commit(json::parse(R"({"commit": "60DE2A8941C1"})"), &why));
  EXPECT_FALSE(record_commit(json::parse(R"({"sources": [{"commit": "897cf8e41c2c"}, {"file": "b.json"}]})"), &why));
  EXPECT_FALSE(record_commit(json::parse(R"([{"commit": "897cf8e41c2c"}])"), &why));
  EXPECT_EQ(record_commit(json::parse(R"({"commit": "60de2a8941c1"})"), &why), "60de2a8941c1");
  EXPECT_EQ(record_commit(json::parse(R"({"commit": "0b6c9b6a3c9a-dirty"})"), &why), "0b6c9b6a3c9a-dirty");
  EXPECT_EQ(record_commit(json::parse(R"({"provenance": {"commit": "49ba6cdcaea3"}})"), &why), "49ba6cdcaea3");
  EXPECT_EQ(record_commit(json::parse(R"({"measured": {"commit": "5752a3e03b6e"}})"), &why), "5752a3e03b6e");
  EXPECT_EQ(record_commit(json::parse(R"({"fitted_by_commit": "cd1ff62c1b62"})"), &why), "cd1ff62c1b62");
  EXPECT_EQ(
      record_commit(json::parse(R"({"sources": [{"commit": "897cf8e41c2c"}, {"commit": "897cf8e41c2c"}]})"), &why),
      "897cf8e41c2c");
  // In text: a hash, not a size or a word.
  EXPECT_TRUE(names_hash("# commit: 49ba6cdcaea3"));
  EXPECT_TRUE(names_hash("tests-05987eb"));
  EXPECT_FALSE(names_hash("visible-host-K132-V1047552-G10000.csv"));
  EXPECT_FALSE(names_hash("commit: unknown, 1980 MHz, deadbeef"));
}

TEST(ResultsProvenance, EveryResultFileNamesItsCommit) {
  const fs::path results = fs::path(XSTAGE_SOURCE_DIR) / "results";
  ASSERT_TRUE(fs::is_directory(results)) << results;
  Provenance prov(results);
  int records = 0, others = 0;
  std::vector<std::string> missing;
  for (const auto& e : fs::recursive_directory_iterator(results)) {
    if (!e.is_regular_file() || is_provenance_file(e.path()) || is_image(e.path())) continue;
    const std::string rel = fs::relative(e.path(), results).string();
    if (e.path().extension() == ".json") {
      ++records;
      std::string why;
      const json doc = json::parse(read_all(e.path()), nullptr, /*allow_exceptions=*/false);
      if (doc.is_discarded())
        missing.push_back(rel + ": not valid JSON");
      else if (!record_commit(doc, &why))
        missing.push_back(rel + ": " + why);
    } else {
      ++others;
      if (!prov.names_commit(e.path()))
        missing.push_back(rel + ": no commit in its first lines, its path, COMMITS, or a README.md / env file");
    }
  }
  // The tree holds a few hundred of each; far fewer means the walk went wrong.
  EXPECT_GT(records, 300);
  EXPECT_GT(others, 300);
  std::string list;
  for (const auto& m : missing) list += "\n  " + m;
  EXPECT_TRUE(missing.empty()) << missing.size() << " result files name no commit (fill it in from the run's env "
                               << "file or git log, saying so: see results/README.md):" << list;
}

TEST(ResultsProvenance, TheLinkCheckFindsMissingPaths) {
  const fs::path results = fs::path(XSTAGE_SOURCE_DIR) / "results";
  EXPECT_EQ(expand_braces("a/{b,c}-{1,2}.csv"),
            (std::vector<std::string>{"a/b-1.csv", "a/b-2.csv", "a/c-1.csv", "a/c-2.csv"}));
  EXPECT_TRUE(wildcard_match("ulysses-*-*.json", "ulysses-host-3b65805.json"));
  EXPECT_FALSE(wildcard_match("ab-*", "final-45270e2"));
  EXPECT_TRUE(missing_results_paths(results, "see `results/h200/probe/probe-{host,local}.csv`.", false).empty());
  EXPECT_TRUE(missing_results_paths(results, "in results/<machine>/<topic>/ and results/README.md.", false).empty());
  EXPECT_EQ(missing_results_paths(results, "(`results/h200/probe/probe-{host,gone}.csv`)", false),
            std::vector<std::string>{"h200/probe/probe-gone.csv"});
  EXPECT_EQ(missing_results_paths(results, "`results/h200/moe-sweep/3bc0a4b/`, xresults/h200/nope", false),
            std::vector<std::string>{"h200/moe-sweep/3bc0a4b/"});
  EXPECT_EQ(missing_results_paths(results, "`results/h200/*/no-such-*.json`", false),
            std::vector<std::string>{"h200/*/no-such-*.json"});
  // Bare h200.../ paths count only in results/README.md.
  EXPECT_TRUE(missing_results_paths(results, "`h200x2/nope/`", false).empty());
  EXPECT_EQ(missing_results_paths(results, "`h200x2/nope/`, `h200/probe/`", true), std::vector<std::string>{"h200x2/nope/"});
}

TEST(ResultsProvenance, EveryResultsPathTheDocsNameExists) {
  const fs::path root = fs::path(XSTAGE_SOURCE_DIR);
  std::vector<std::pair<fs::path, bool>> docs{{root / "README.md", false}, {root / "bench" / "README.md", false},
                                              {root / "results" / "README.md", true}};
  for (const auto& e : fs::recursive_directory_iterator(root / "docs"))
    if (e.is_regular_file() && e.path().extension() == ".md") docs.emplace_back(e.path(), false);
  size_t named = 0;
  std::string list;
  for (const auto& [doc, bare] : docs) {
    const std::string text = read_all(doc);
    named += named_results_paths(text, bare).size();
    for (const std::string& m : missing_results_paths(root / "results", text, bare))
      list += "\n  " + fs::relative(doc, root).string() + ": results/" + m;
  }
  EXPECT_GT(named, 200u);  // the docs name about 300; far fewer means the scan went wrong
  EXPECT_TRUE(list.empty()) << "paths under results/ that the docs name and that do not exist (moved to an "
                            << "archive/? see results/README.md):" << list;
}

}  // namespace
