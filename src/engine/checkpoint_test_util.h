// Test helper of the checkpoint tests: an empty scratch directory.
#pragma once

#include <filesystem>
#include <string>

namespace frugal::engine {

// <tmp>/<suite>/<name>, emptied and created.
inline std::string FreshTempDir(const std::string& suite, const std::string& name) {
  std::filesystem::path p = std::filesystem::temp_directory_path() / suite / name;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

}  // namespace frugal::engine
