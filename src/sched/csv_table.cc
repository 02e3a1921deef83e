#include "csv_table.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>

namespace frugal::sched {
namespace {

std::vector<std::string> SplitFields(const std::string& line) {
  std::vector<std::string> fields;
  size_t start = 0;
  while (true) {
    size_t comma = line.find(',', start);
    std::string f = line.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    // Trim spaces so hand-written files with "a, b" still parse.
    size_t b = f.find_first_not_of(" \t");
    size_t e = f.find_last_not_of(" \t");
    fields.push_back(b == std::string::npos ? std::string() : f.substr(b, e - b + 1));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return fields;
}

}  // namespace

Result<CsvTable> CsvTable::Read(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path + ": cannot open file");
  CsvTable table;
  table.path_ = path;
  std::string line;
  int line_no = 0;
  bool have_header = false;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    std::vector<std::string> fields = SplitFields(line);
    if (!have_header) {
      table.header_ = std::move(fields);
      have_header = true;
      continue;
    }
    if (fields.size() != table.header_.size()) {
      return Status::Corruption(path + ":" + std::to_string(line_no) + ": expected " +
                                std::to_string(table.header_.size()) + " fields, got " +
                                std::to_string(fields.size()));
    }
    table.rows_.push_back(std::move(fields));
    table.lines_.push_back(line_no);
  }
  if (!have_header) return Status::Corruption(path + ":1: empty file, expected a CSV header");
  return table;
}

Result<int> CsvTable::Column(const std::string& name) const {
  for (size_t i = 0; i < header_.size(); ++i) {
    if (header_[i] == name) return static_cast<int>(i);
  }
  std::string cols;
  for (const auto& h : header_) cols += (cols.empty() ? "" : ",") + h;
  return Status::Corruption(path_ + ":1: missing column '" + name + "' (header is '" + cols + "')");
}

std::string CsvTable::Where(size_t row) const { return path_ + ":" + std::to_string(lines_[row]); }

Result<double> CsvTable::Number(size_t row, int col) const {
  const std::string& s = rows_[row][col];
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v)) {
    return Status::Corruption(Where(row) + ": column '" + header_[col] + "': '" + s +
                              "' is not a finite number");
  }
  return v;
}

Result<long long> CsvTable::Integer(size_t row, int col) const {
  FRUGAL_ASSIGN_OR_RETURN(double v, Number(row, col));
  if (v != std::floor(v)) {
    return Status::Corruption(Where(row) + ": column '" + header_[col] + "': '" + Field(row, col) +
                              "' is not an integer");
  }
  return static_cast<long long>(v);
}

}  // namespace frugal::sched
