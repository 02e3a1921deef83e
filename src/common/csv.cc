#include "frugal/common/csv.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "frugal/common/file.h"
#include "frugal/common/text.h"

namespace frugal {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Splits on commas outside double quotes; "" inside quotes is a quote.
std::vector<std::string> SplitFields(const std::string& line) {
  std::vector<std::string> fields;
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '"' && quoted && i + 1 < line.size() && line[i + 1] == '"') {
      cur += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      fields.push_back(Trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  fields.push_back(Trim(cur));
  return fields;
}

bool HasField(const std::vector<std::string>& fields, const std::string& lowered_name) {
  for (const std::string& f : fields) {
    if (Lower(f) == lowered_name) return true;
  }
  return false;
}

}  // namespace

std::optional<double> ParseFiniteNumber(const std::string& text) {
  const std::string s = Trim(text);
  if (s.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v)) return std::nullopt;
  return v;
}

Result<CsvTable> CsvTable::Parse(const std::string& text, const std::string& source, const CsvOptions& options) {
  CsvTable table;
  table.source_ = source;
  const std::string header_field = Lower(options.header_field);
  bool have_header = false;
  int line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (line_no == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string trimmed = Trim(line);
    if (trimmed.empty()) continue;
    std::vector<std::string> fields = SplitFields(line);
    if (options.hash_comments && trimmed[0] == '#' &&
        (have_header || header_field.empty() || !HasField(fields, header_field))) {
      continue;
    }
    if (!have_header) {
      table.header_ = std::move(fields);
      table.header_line_ = line_no;
      have_header = true;
      continue;
    }
    if (fields.size() != table.header_.size()) {
      return Status::Corruption(source + ":" + std::to_string(line_no) + ": expected " +
                                std::to_string(table.header_.size()) + " fields, found " +
                                std::to_string(fields.size()));
    }
    table.rows_.push_back(std::move(fields));
    table.lines_.push_back(line_no);
  }
  if (!have_header) return Status::Corruption(source + ": no CSV header line");
  return table;
}

Result<CsvTable> CsvTable::Read(const std::string& path, const CsvOptions& options) {
  FRUGAL_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path, "CSV file"));
  return Parse(text, path, options);
}

std::string CsvTable::Where(size_t row) const { return source_ + ":" + std::to_string(lines_[row]); }

Status CsvTable::Error(size_t row, const std::string& what) const {
  return Status::Corruption(Where(row) + ": " + what);
}

Status CsvTable::HeaderError(const std::string& what) const {
  return Status::Corruption(source_ + ":" + std::to_string(header_line_) + ": " + what);
}

Result<int> CsvTable::Column(const std::string& name) const {
  for (size_t i = 0; i < header_.size(); ++i) {
    if (header_[i] == name) return static_cast<int>(i);
  }
  std::string cols;
  for (const auto& h : header_) cols += (cols.empty() ? "" : ",") + h;
  return HeaderError("missing column '" + name + "' (header is '" + cols + "')");
}

Status CsvTable::Columns(std::initializer_list<std::pair<const char*, int*>> columns) const {
  for (const auto& [name, index] : columns) {
    FRUGAL_ASSIGN_OR_RETURN(*index, Column(name));
  }
  return Status::Ok();
}

int CsvTable::FindColumn(const std::string& name) const {
  const std::string lowered = Lower(name);
  for (size_t i = 0; i < header_.size(); ++i) {
    if (Lower(header_[i]) == lowered) return static_cast<int>(i);
  }
  return -1;
}

Result<std::vector<int>> CsvTable::BindColumns(const std::vector<CsvColumn>& columns) const {
  std::vector<int> index(columns.size(), -1);
  for (size_t i = 0; i < header_.size(); ++i) {
    const std::string name = Lower(header_[i]);
    size_t found = columns.size();
    for (size_t c = 0; c < columns.size(); ++c) {
      if (name == Lower(columns[c].name)) found = c;
    }
    if (found == columns.size()) return HeaderError("unknown column '" + header_[i] + "'");
    if (index[found] >= 0) return HeaderError("column '" + header_[i] + "' appears twice");
    index[found] = static_cast<int>(i);
  }
  for (size_t c = 0; c < columns.size(); ++c) {
    if (index[c] < 0 && !columns[c].optional) return HeaderError("missing column '" + columns[c].name + "'");
  }
  return index;
}

Result<double> CsvTable::Number(size_t row, int col) const {
  std::optional<double> v = ParseFiniteNumber(Field(row, col));
  if (!v) return Error(row, "column '" + header_[col] + "': '" + Field(row, col) + "' is not a finite number");
  return *v;
}

Result<long long> CsvTable::Integer(size_t row, int col) const {
  FRUGAL_ASSIGN_OR_RETURN(double v, Number(row, col));
  if (v != std::floor(v)) {
    return Error(row, "column '" + header_[col] + "': '" + Field(row, col) + "' is not an integer");
  }
  // Outside [-2^63, 2^63) the conversion is undefined (found by fuzz/csv_fuzz.cc).
  if (v < -9223372036854775808.0 || v >= 9223372036854775808.0) {
    return Error(row, "column '" + header_[col] + "': '" + Field(row, col) + "' is out of range");
  }
  return static_cast<long long>(v);
}

}  // namespace frugal
