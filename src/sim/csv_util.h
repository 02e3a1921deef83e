// Small CSV helpers shared by the measurement readers of src/sim (internal).
#pragma once

#include <cctype>
#include <string>
#include <vector>

namespace frugal::sim::internal {

// Trimmed, lower-cased, surrounding double quotes removed.
inline std::string NormaliseField(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
  if (out.size() >= 2 && out.front() == '"' && out.back() == '"') out = out.substr(1, out.size() - 2);
  return out;
}

// Splits on commas outside double quotes.
inline std::vector<std::string> SplitCsvLine(const std::string& line) {
  std::vector<std::string> fields;
  std::string cur;
  bool quoted = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      fields.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  fields.push_back(cur);
  return fields;
}

// Removes a UTF-8 byte-order mark and a trailing '\r'.
inline void CleanLine(std::string* line, bool first) {
  if (first && line->size() >= 3 && line->compare(0, 3, "\xEF\xBB\xBF") == 0) *line = line->substr(3);
  if (!line->empty() && line->back() == '\r') line->pop_back();
}

}  // namespace frugal::sim::internal
