// Whole-file reading for the parsers of config, CSV and TOML inputs.
#pragma once

#include <string>

#include "frugal/common/status.h"

namespace frugal {

// The contents of `path`. NotFound "cannot open <what> '<path>'" when it
// cannot be opened; IOError when reading fails.
Result<std::string> ReadTextFile(const std::string& path, const std::string& what);

}  // namespace frugal
