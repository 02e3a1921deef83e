#include "frugal/common/file.h"

#include <fstream>
#include <sstream>

namespace frugal {

Result<std::string> ReadTextFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open " + what + " '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IOError("cannot read " + what + " '" + path + "'");
  return ss.str();
}

}  // namespace frugal
