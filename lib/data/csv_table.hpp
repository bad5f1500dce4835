// A numeric table read from a CSV file (RFC 4180, parsed by libcsv): a header
// row of column names, then rows of finite numbers. For small tabular inputs
// such as metrics, schedules or per-sample values; a file is read whole, and
// anything malformed is a UsageError naming the file, line and column.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace wt::data {

// A CSV file's cells as text (trimmed), for tables of names and captions.
struct CsvText {
  std::string path;
  std::vector<std::string> columns;  // header names, in file order
  std::vector<std::string> cells;    // row-major, rows() * columns.size()
  std::vector<int64_t> lines;        // the line each row starts on (the header is line 1)
  int64_t rows() const { return int64_t(lines.size()); }
  const std::string& cell(int64_t row, int64_t column) const {
    return cells[size_t(row) * columns.size() + size_t(column)];
  }
  int64_t column(const std::string& name) const;  // as CsvTable::column
};

struct CsvTable {
  std::string path;
  std::vector<std::string> columns;  // header names, in file order
  int64_t rows = 0;
  std::vector<double> values;  // row-major, rows * columns.size()

  // Index of a column by name; UsageError naming the file, the missing name and listing the columns.
  int64_t column(const std::string& name) const;
  // The named columns as an [rows, names.size()] fp64 tensor, in that order
  // (each name checked as column() does).
  at::Tensor columns_tensor(const std::vector<std::string>& names) const;
};

// Reads the whole file. Every bad input is a one-line UsageError naming the file and, where it applies, the line
// (1-based, the header is line 1; for a record, the line on which it starts, counting newlines inside quoted fields)
// and the column (1-based index and header name); a quoting error names the line it is found on, an unterminated
// quote the line its record starts on. Header names and cells are trimmed of whitespace; a cell must be one finite
// number for std::strtod (so hex floats pass too). Blank lines are skipped; CRLF endings and a UTF-8 byte order mark
// are fine; lines are counted by '\n' only, so a file ended by lone CRs is all line 1.
CsvTable read_csv_table(const std::string& path);
// The same parse with text cells: every check above but the numbers.
CsvText read_csv_text(const std::string& path);

}  // namespace wt::data
