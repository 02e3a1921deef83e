// A small CSV reader for the scheduler's input files (traces, workloads,
// tables). No quoting: none of these files need it. Every error names the
// file and the 1-based line.
#pragma once

#include <string>
#include <vector>

#include "frugal/common/status.h"

namespace frugal::sched {

class CsvTable {
 public:
  // Reads `path`: a header line and rows with as many fields as the header.
  // Blank lines are skipped. NotFound if the file cannot be opened.
  static Result<CsvTable> Read(const std::string& path);

  const std::string& path() const { return path_; }
  size_t NumRows() const { return rows_.size(); }
  const std::vector<std::string>& header() const { return header_; }

  // Index of column `name`, or Corruption naming the file and its header.
  Result<int> Column(const std::string& name) const;

  const std::string& Field(size_t row, int col) const { return rows_[row][col]; }
  // The field as a finite number, or Corruption "path:line: column 'c': ...".
  Result<double> Number(size_t row, int col) const;
  Result<long long> Integer(size_t row, int col) const;
  // "path:line" of a row, for error messages.
  std::string Where(size_t row) const;

 private:
  std::string path_;
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<int> lines_;
};

}  // namespace frugal::sched
