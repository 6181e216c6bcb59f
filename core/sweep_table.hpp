// The CSV a sweep writes: a header, then one row per point, its coordinates (model, hwprofile,
// nodes, config, one column per field axis) and then its results. A row is appended with a single
// write as its point finishes and the file is never truncated in place, so a sweep killed at any
// moment leaves whole rows and at most one unterminated last line, which reading ignores. A
// SweepTable is used from one thread; plain functions are thread-safe.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/sweep_spec.hpp"

namespace zinf::core {

// The result columns every row has after its coordinates; "status" is ok, does-not-fit or error.
const std::vector<std::string>& sweep_result_columns();
// All columns of a spec's CSV.
std::vector<std::string> sweep_columns(const SweepSpec& spec);

std::string csv_quote(const std::string& s);
std::vector<std::string> csv_split(const std::string& line);

// One row: the point's coordinates and `results` by column name (absent: empty).
std::string sweep_row(const SweepPoint& p, const std::map<std::string, std::string>& results,
                      const std::vector<std::string>& columns);

// The key (SweepPoint::key) a row of `columns` stands for.
std::string row_key(const std::vector<std::string>& fields, const std::vector<std::string>& columns);

// Rows of an earlier run of the same spec whose points are finished (status ok or does-not-fit),
// by point key. Rows with status error are left out, so their points run again: an error may be a
// process that died (a signal, memory) rather than the point itself. No file: none. Throws
// ConfigError naming the CSV if its header is not `columns` (another spec wrote it).
std::map<std::string, std::string> read_finished_rows(const std::string& csv_path, const std::vector<std::string>& columns);

class SweepTable {
public:
  // Starts `path` afresh with the header and `kept` rows (whole lines, without newline), written
  // to a temporary file renamed over `path`, so a kill during the rewrite loses nothing.
  SweepTable(const std::string& path, const std::vector<std::string>& columns, const std::vector<std::string>& kept);
  ~SweepTable();
  SweepTable(const SweepTable&) = delete;
  SweepTable& operator=(const SweepTable&) = delete;

  // Appends one row with one write(2), so concurrent kills leave the row whole or absent.
  void append(const std::string& row);
  // Rewrites the file with its rows in `order` of keys (the spec's order); rows not named go last.
  void sort_rows(const std::vector<std::string>& order);

private:
  std::string path_;
  std::vector<std::string> columns_;
  int fd_ = -1;
};

}  // namespace zinf::core
