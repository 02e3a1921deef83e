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
