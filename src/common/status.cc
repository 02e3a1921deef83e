#include "frugal/common/status.h"

namespace frugal {

namespace {
const char* CodeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk: return "OK";
    case Status::Code::kInvalidArgument: return "Invalid argument";
    case Status::Code::kNotFound: return "Not found";
    case Status::Code::kCorruption: return "Corruption";
    case Status::Code::kIOError: return "IO error";
    case Status::Code::kTimeout: return "Timeout";
    case Status::Code::kUnavailable: return "Unavailable";
    case Status::Code::kInternal: return "Internal error";
  }
  return "Unknown";
}
}  // namespace

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

}  // namespace frugal
