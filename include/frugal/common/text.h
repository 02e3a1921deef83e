// Small text helpers shared by the parsers of files and command output.
//
// Thread safety: pure functions.
#pragma once

#include <string>

namespace frugal {

// `s` without leading and trailing whitespace (isspace: blanks, tabs,
// carriage returns, newlines).
std::string Trim(const std::string& s);

}  // namespace frugal
