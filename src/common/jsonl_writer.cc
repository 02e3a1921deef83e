#include "frugal/common/jsonl_writer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace frugal {

Result<std::unique_ptr<JsonlWriter>> JsonlWriter::Open(const std::string& path, bool truncate) {
  std::error_code ec;
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::filesystem::create_directories(parent, ec);
    if (ec) return Status::IOError("cannot create directory " + parent.string() + ": " + ec.message());
  }
  std::FILE* f = std::fopen(path.c_str(), truncate ? "w" : "a");
  if (f == nullptr) return Status::IOError("cannot open " + path + ": " + std::strerror(errno));
  return std::unique_ptr<JsonlWriter>(new JsonlWriter(path, f));
}

JsonlWriter::~JsonlWriter() { std::fclose(file_); }

Status JsonlWriter::Write(const nlohmann::json& record) {
  std::string line = record.dump();
  line.push_back('\n');
  std::lock_guard<std::mutex> lock(mu_);
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    return Status::IOError("cannot write " + path_ + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace frugal
