// Checks on TOML text before it reaches toml11 (3.7, Debian 12), which has
// undefined behaviour on some inputs that fuzzing found. Header-only.
#pragma once

#include <cctype>
#include <cstddef>
#include <string>

#include "frugal/common/utf8.h"

namespace frugal {

// toml11's binary-integer parser doubles a signed 64-bit place value once per
// digit, leading zeros included, so a literal of 63 or more binary digits
// overflows it (UBSan, fuzz/sim_fuzz.cc). Binary literals are cut at 62.
inline constexpr size_t kMaxTomlBinaryDigits = 62;

// toml11 parses arrays and inline tables recursively: about 300 nested '['
// overflow the stack (found by fuzz/sim_fuzz.cc). Deeper nesting than
// this, outside strings and comments, is refused.
inline constexpr int kMaxTomlNesting = 64;

// The byte at which `text` nests arrays or inline tables deeper than
// kMaxTomlNesting, or npos. Strings (basic, literal, multi-line) and
// comments are skipped, so brackets inside them do not count.
inline size_t TomlNestingTooDeep(const std::string& text) {
  const size_t n = text.size();
  int depth = 0;
  for (size_t i = 0; i < n; ++i) {
    const char c = text[i];
    if (c == '#') {
      while (i < n && text[i] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      const size_t len = (i + 2 < n && text[i + 1] == c && text[i + 2] == c) ? 3 : 1;
      size_t j = i + len;
      while (j < n && text.compare(j, len, std::string(len, c)) != 0) {
        if (len == 1 && text[j] == '\n') break;  // unterminated: toml11 reports it
        j += (c == '"' && text[j] == '\\') ? 2 : 1;
      }
      i = j + len - 1;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxTomlNesting) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string::npos;
}

// Why `text` must not be given to toml11, as "LINE: what" ("2: not UTF-8
// text (byte 23)", "5: binary integer at byte 80 has 70 digits; ..."), or ""
// if it may. A `0b` literal inside a string is counted too: such a string is
// refused, never misread.
inline std::string TomlTextProblem(const std::string& text) {
  auto at = [&](size_t byte) {
    size_t line = 1;
    for (size_t k = 0; k < byte; ++k) line += text[k] == '\n';
    return std::to_string(line) + ": ";
  };
  const size_t bad = FirstInvalidUtf8(text);
  if (bad != std::string::npos) return at(bad) + "not UTF-8 text (byte " + std::to_string(bad) + ")";
  const size_t deep = TomlNestingTooDeep(text);
  if (deep != std::string::npos) {
    return at(deep) + "arrays or inline tables nested more than " + std::to_string(kMaxTomlNesting) +
           " deep (byte " + std::to_string(deep) + ")";
  }
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    if (text[i] != '0' || text[i + 1] != 'b') continue;
    if (i > 0 && (std::isalnum(static_cast<unsigned char>(text[i - 1])) || text[i - 1] == '_')) continue;
    size_t digits = 0;
    for (size_t j = i + 2; j < text.size() && (text[j] == '0' || text[j] == '1' || text[j] == '_'); ++j) {
      digits += text[j] != '_';
    }
    if (digits > kMaxTomlBinaryDigits) {
      return at(i) + "binary integer at byte " + std::to_string(i) + " has " + std::to_string(digits) +
             " digits; at most " + std::to_string(kMaxTomlBinaryDigits) + " are accepted";
    }
  }
  return "";
}

}  // namespace frugal
