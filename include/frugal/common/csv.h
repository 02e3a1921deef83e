// CsvTable: the one CSV reader of Frugal's input files (the simulator's
// measurement tables and profile databases, the scheduler's traces,
// workloads and throughput tables).
//
// A file is a header line naming the columns, then rows with as many
// fields. Fields are split on commas outside double quotes (the quotes are
// removed; "" inside quotes is a quote) and trimmed of blanks. Blank lines
// are skipped; a UTF-8 byte-order mark and CRLF line ends are accepted.
// Every error names the source and the 1-based line ("f.csv:3: ..."):
// Corruption for malformed input, NotFound for a file that cannot be opened.
//
// Thread safety: an immutable value once parsed.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "frugal/common/status.h"

namespace frugal {

struct CsvOptions {
  // Lines whose first non-blank character is '#' are comments. Default off.
  bool hash_comments = false;
  // With hash_comments, a '#' line before the header with a field equal to
  // this (ignoring case) is the header rather than a comment: published
  // tables name a column "# GPUs". Default empty: no such header.
  std::string header_field;
};

// A column the caller knows, for CsvTable::BindColumns.
struct CsvColumn {
  std::string name;  // matched ignoring case
  bool optional = false;
};

class CsvTable {
 public:
  // `source` names the text in error messages (usually its path).
  // Corruption when there is no header line or a row's width differs from
  // the header's.
  static Result<CsvTable> Parse(const std::string& text, const std::string& source,
                                const CsvOptions& options = {});
  // Reads and parses the file at `path`; NotFound if it cannot be opened.
  static Result<CsvTable> Read(const std::string& path, const CsvOptions& options = {});

  const std::string& source() const { return source_; }
  const std::vector<std::string>& header() const { return header_; }
  int header_line() const { return header_line_; }
  size_t NumRows() const { return rows_.size(); }
  // REQUIRES: row < NumRows(), 0 <= col < header().size().
  const std::string& Field(size_t row, int col) const { return rows_[row][col]; }
  int Line(size_t row) const { return lines_[row]; }

  // "source:line" of a row, and a Corruption "source:line: what" about it.
  std::string Where(size_t row) const;
  Status Error(size_t row, const std::string& what) const;
  // A Corruption "source:line: what" about the header line.
  Status HeaderError(const std::string& what) const;

  // Index of the column named exactly `name`, or Corruption naming the
  // source and its header.
  Result<int> Column(const std::string& name) const;
  // Several columns by exact name: sets each pair's int to its column's
  // index; Corruption (as Column) for the first missing one.
  Status Columns(std::initializer_list<std::pair<const char*, int*>> columns) const;
  // Index of the column named `name` ignoring case, or -1.
  int FindColumn(const std::string& name) const;
  // For a fixed set of known columns: result[i] is the index of
  // columns[i], or -1 when it is optional and absent. Corruption for a
  // header column not in the set, a repeated one or a missing required one.
  Result<std::vector<int>> BindColumns(const std::vector<CsvColumn>& columns) const;

  // The field as a finite number (ParseFiniteNumber), or Corruption
  // "source:line: column 'c': 'x' is not a finite number".
  Result<double> Number(size_t row, int col) const;
  // ... and as a whole number.
  Result<long long> Integer(size_t row, int col) const;

 private:
  std::string source_;
  std::vector<std::string> header_;
  int header_line_ = 0;
  std::vector<std::vector<std::string>> rows_;
  std::vector<int> lines_;
};

// `text` (blanks around it allowed) as a finite number: nullopt for an
// empty field, trailing characters, NaN, infinity or an out-of-range value.
std::optional<double> ParseFiniteNumber(const std::string& text);

}  // namespace frugal
