#include "input_checks.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "commands.h"

namespace frugal::cli {

CLI::Validator Bounded(double lo, double hi, const std::string& why) {
  char range[96];
  std::snprintf(range, sizeof range, "[%.15g, %.15g]", lo, hi);
  const std::string bound = range;
  return CLI::Validator(
      [lo, hi, why, bound](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(text.c_str(), &end);
        const bool parsed = !text.empty() && end != nullptr && *end == '\0';
        if (parsed && errno == 0 && std::isfinite(v) && v >= lo && v <= hi) return "";
        return "must be a finite number in " + bound + (why.empty() ? "" : " (" + why + ")") + ", got '" + text + "'";
      },
      bound);
}

void CheckWritable(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw UsageError(flag + " " + path + ": is a directory, not a file");
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && !fs::is_directory(parent, ec)) {
    throw UsageError(flag + " " + path + ": folder " + parent.string() + " does not exist");
  }
}

}  // namespace frugal::cli
