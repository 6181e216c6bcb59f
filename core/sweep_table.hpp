// The CSV a sweep writes: a header, then one row per point, its coordinates (model, hwprofile,
// nodes, config, one column per field axis) and then its results; the text of it, as pure
// functions (thread-safe). The file itself is an engine::RowFile (engine/io/row_file.hpp): locked,
// read within bounds, rewritten whole, a row appended in one write as its point finishes.
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

// The header line of a spec's CSV.
std::string sweep_header(const std::vector<std::string>& columns);

// Rows of an earlier run of the same spec (the CSV's text, `csv_path` for messages) whose points
// are finished (status ok or does-not-fit), by point key. Rows with status error are left out, so
// their points run again: an error may be a process that died (a signal, memory) rather than the
// point itself. Only whole lines count: a last line without its newline is a row a kill cut short.
// Empty text: none. Throws ConfigError naming the CSV if its header is not `columns` (another spec
// wrote it).
std::map<std::string, std::string> read_finished_rows(const std::string& csv_text, const std::string& csv_path,
                                                      const std::vector<std::string>& columns);

// `rows` in the order of `order`'s keys (the spec's order); rows not named go last.
std::vector<std::string> sorted_rows(const std::vector<std::string>& rows, const std::vector<std::string>& order,
                                     const std::vector<std::string>& columns);

}  // namespace zinf::core
