// JsonlWriter: appends one JSON object per line to a file (metrics.jsonl).
// Each line is flushed as it is written so a killed run keeps its metrics.
//
// Thread safety: Write() may be called from several threads.
#pragma once

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "frugal/common/status.h"

namespace frugal {

class JsonlWriter {
 public:
  // Creates the parent directories of `path` and opens it for appending
  // (truncate = false) or writing from scratch (truncate = true).
  static Result<std::unique_ptr<JsonlWriter>> Open(const std::string& path, bool truncate);
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;

  Status Write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  JsonlWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}

  std::string path_;
  std::mutex mu_;
  std::FILE* file_;  // GUARDED_BY(mu_)
};

}  // namespace frugal
