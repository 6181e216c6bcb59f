#include "core/sweep_table.hpp"

#include <fmt/format.h>

#include "core/errors.hpp"

namespace zinf::core {

namespace {

const std::vector<std::string> kCoordinates = {"model", "hwprofile", "nodes", "config"};

// Whole lines only: a last line without its newline is a row a kill cut short.
std::vector<std::string> whole_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t pos = 0;
  for (size_t nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1) lines.push_back(text.substr(pos, nl - pos));
  return lines;
}

}  // namespace

std::string sweep_header(const std::vector<std::string>& columns) {
  std::string out;
  for (size_t i = 0; i < columns.size(); ++i) {
    if (i) out += ',';
    out += csv_quote(columns[i]);
  }
  return out;
}

const std::vector<std::string>& sweep_result_columns() {
  static const std::vector<std::string> cols = {
      "gpus", "status", "step_time_s", "samples_per_s", "tflops_per_gpu", "percent_of_peak", "ideal_step_time_s",
      "busy_gpu", "busy_pcie_h2d", "busy_pcie_d2h", "busy_nvme_read", "busy_nvme_write", "busy_comm", "busy_nic",
      "busy_cpu", "peak_device_per_gpu", "peak_host_per_node", "peak_nvme_per_node", "within_budget", "tiling_factor",
      "sim_wall_s", "message"};
  return cols;
}

std::vector<std::string> sweep_columns(const SweepSpec& spec) {
  std::vector<std::string> cols = kCoordinates;
  for (const auto* a : spec.field_axes()) cols.push_back(a->column());
  for (const auto& c : sweep_result_columns()) cols.push_back(c);
  return cols;
}

std::string csv_quote(const std::string& s) {
  // Plain words and numbers stay bare, so the CSV reads well; anything with a separator is quoted.
  if (s.find_first_of(",\"\n\r ") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += (c == '\n' || c == '\r') ? ' ' : c;
  }
  return out + "\"";
}

std::vector<std::string> csv_split(const std::string& line) {
  std::vector<std::string> out(1);
  bool in_quotes = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_quotes) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"') {
        in_quotes = false;
      } else {
        out.back() += c;
      }
    } else if (c == '"') {
      in_quotes = true;
    } else if (c == ',') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

std::string sweep_row(const SweepPoint& p, const std::map<std::string, std::string>& results,
                      const std::vector<std::string>& columns) {
  std::vector<std::string> v = {p.model, p.hwprofile, std::to_string(p.nodes), p.config};
  for (const auto& c : p.coords) v.push_back(c);
  for (size_t i = v.size(); i < columns.size(); ++i) {
    auto it = results.find(columns[i]);
    v.push_back(it == results.end() ? "" : it->second);
  }
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    out += csv_quote(v[i]);
  }
  return out;
}

std::string row_key(const std::vector<std::string>& fields, const std::vector<std::string>& columns) {
  const size_t coords = columns.size() - sweep_result_columns().size();
  std::string k;
  for (size_t i = 0; i < coords && i < fields.size(); ++i) {
    if (i) k += '|';
    k += fields[i];
  }
  return k;
}

std::map<std::string, std::string> read_finished_rows(const std::string& csv_text, const std::string& csv_path,
                                                      const std::vector<std::string>& columns) {
  std::map<std::string, std::string> kept;
  const auto lines = whole_lines(csv_text);
  if (lines.empty()) return kept;
  if (csv_split(lines.front()) != columns)
    throw ConfigError(csv_path, "",
                      "this CSV was written by a sweep with other axes (its header differs); give another --out, or "
                      "move it away to start afresh");
  size_t status = 0;
  while (columns[status] != "status") ++status;
  for (size_t i = 1; i < lines.size(); ++i) {
    const auto f = csv_split(lines[i]);
    if (f.size() != columns.size()) continue;
    if (f[status] != "ok" && f[status] != "does-not-fit") continue;
    kept[row_key(f, columns)] = lines[i];
  }
  return kept;
}

std::vector<std::string> sorted_rows(const std::vector<std::string>& rows, const std::vector<std::string>& order,
                                     const std::vector<std::string>& columns) {
  std::map<std::string, std::string> by_key;
  std::vector<std::string> rest;
  for (const auto& line : rows) {
    const auto f = csv_split(line);
    if (f.size() == columns.size()) by_key[row_key(f, columns)] = line;
    else rest.push_back(line);
  }
  std::vector<std::string> sorted;
  for (const auto& k : order)
    if (auto it = by_key.find(k); it != by_key.end()) {
      sorted.push_back(it->second);
      by_key.erase(it);
    }
  for (auto& [k, line] : by_key) sorted.push_back(line);
  for (auto& line : rest) sorted.push_back(line);
  return sorted;
}

}  // namespace zinf::core
