// Helpers shared by the libFuzzer targets in this directory (make fuzz;
// docs/design/security.md, "Fuzzing").
//
// A target whose parser reads a path rather than bytes writes the input to a
// scratch file first (TempFile): one per process, so parallel fuzzers (-jobs)
// do not share it.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace frugal::fuzz {

// A fuzz input consumed from the front: selector bytes first, the rest as
// the parser's input.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  // The next byte, or 0 once the input is used up.
  uint8_t Byte() {
    if (size_ == 0) return 0;
    --size_;
    return *data_++;
  }
  std::string RestAsString() const { return std::string(reinterpret_cast<const char*>(data_), size_); }
  std::vector<uint8_t> RestAsBytes() const { return std::vector<uint8_t>(data_, data_ + size_); }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_;
  size_t size_;
};

// Writes `bytes` to a scratch file named after this process and `suffix`
// (some loaders look at the extension, e.g. ".gz") and returns its path.
inline std::string TempFile(const std::string& bytes, const std::string& suffix) {
  const char* dir = std::getenv("TMPDIR");
  std::string path = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/frugal-fuzz-" +
                     std::to_string(::getpid()) + suffix;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) __builtin_trap();  // The target cannot run at all; say so loudly.
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) __builtin_trap();
  std::fclose(f);
  return path;
}

// Aborts the run (a finding) when a parser breaks its own contract.
#define FRUGAL_FUZZ_CHECK(cond)                                                   \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, __LINE__, #cond); \
      __builtin_trap();                                                           \
    }                                                                             \
  } while (0)

}  // namespace frugal::fuzz
