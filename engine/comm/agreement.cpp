#include "engine/comm/agreement.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

namespace zinf::engine {
namespace {

using Fields = std::map<std::string, std::string>;

// One line per field, "name\tvalue\n", with tabs, newlines and backslashes in values escaped.
std::string encode(const Fields& fields) {
  std::string out;
  for (const auto& [name, value] : fields) {
    out += name;
    out += '\t';
    for (char ch : value) {
      if (ch == '\\') out += "\\\\";
      else if (ch == '\n') out += "\\n";
      else if (ch == '\t') out += "\\t";
      else out += ch;
    }
    out += '\n';
  }
  return out;
}

Fields decode(const std::string& text) {
  Fields out;
  size_t pos = 0;
  while (pos < text.size() && text[pos] != '\0') {
    const size_t tab = text.find('\t', pos), end = text.find('\n', pos);
    if (tab == std::string::npos || end == std::string::npos || tab > end) break;
    std::string value;
    for (size_t i = tab + 1; i < end; ++i) {
      if (text[i] == '\\' && i + 1 < end) {
        const char e = text[++i];
        value += e == 'n' ? '\n' : e == 't' ? '\t' : e;
      } else {
        value += text[i];
      }
    }
    out[text.substr(pos, tab - pos)] = std::move(value);
    pos = end + 1;
  }
  return out;
}

std::string shown(const std::string* value) {
  if (!value) return "(none)";
  if (value->empty()) return "(empty)";
  constexpr size_t kLongest = 80;
  return value->size() <= kLongest ? *value : value->substr(0, kLongest) + "...";
}

// "rank 0" / "ranks 1, 2 and 5"
std::string ranks_text(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i)
    out += fmt::format("{}{}", i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ", ranks[i]);
  return fmt::format("rank{} {}", ranks.size() == 1 ? "" : "s", out);
}

}  // namespace

void require_agreement(Collectives& comm, const Fields& fields, const std::string& stage) {
  const int n = comm.size();
  if (n == 1) return;
  std::string mine = encode(fields);
  uint64_t size = mine.size();
  std::vector<uint64_t> sizes(size_t(n), 0);
  comm.all_gather(&size, sizeof size, sizes.data(), "the fields ranks must agree on (sizes)");
  const uint64_t longest = std::max<uint64_t>(1, *std::max_element(sizes.begin(), sizes.end()));
  mine.resize(size_t(longest), '\0');
  std::string every(size_t(longest) * size_t(n), '\0');
  comm.all_gather(mine.data(), size_t(longest), every.data(), "the fields ranks must agree on");
  std::vector<Fields> by_rank;
  std::set<std::string> names;
  for (int r = 0; r < n; ++r) {
    by_rank.push_back(decode(every.substr(size_t(r) * size_t(longest), size_t(sizes[size_t(r)]))));
    for (const auto& [name, value] : by_rank.back()) names.insert(name);
  }
  std::vector<std::string> lines;
  for (const std::string& name : names) {
    // Ranks grouped by the value they have, in order of the lowest rank with each value.
    std::vector<std::pair<const std::string*, std::vector<int>>> groups;
    for (int r = 0; r < n; ++r) {
      const auto it = by_rank[size_t(r)].find(name);
      const std::string* v = it == by_rank[size_t(r)].end() ? nullptr : &it->second;
      auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& e) {
        return (e.first == nullptr && v == nullptr) || (e.first && v && *e.first == *v);
      });
      if (g == groups.end()) groups.push_back({v, {r}});
      else g->second.push_back(r);
    }
    if (groups.size() == 1) continue;
    std::string line = "  " + name + ":";
    for (size_t i = 0; i < groups.size(); ++i)
      line += fmt::format("{} {} {} {}", i == 0 ? "" : ";", ranks_text(groups[i].second),
                          groups[i].second.size() == 1 ? "has" : "have", shown(groups[i].first));
    lines.push_back(std::move(line));
  }
  if (lines.empty()) return;
  constexpr size_t kShown = 12;
  std::string list;
  for (size_t i = 0; i < lines.size() && i < kShown; ++i) list += "\n" + lines[i];
  if (lines.size() > kShown) list += fmt::format("\n  and {} more", lines.size() - kShown);
  throw RanksDisagree(fmt::format("the {} ranks of this job disagree {} on {} field{}; every rank must run the same "
                                  "zinf with the same model, config, data and options:{}",
                                  n, stage, lines.size(), lines.size() == 1 ? "" : "s", list));
}

}  // namespace zinf::engine
