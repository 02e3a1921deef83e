// Parser for the IDX file format of (Fashion-)MNIST:
//   bytes 0-1: 0, byte 2: element type (0x08 = unsigned byte), byte 3: number
//   of dimensions d, then d big-endian u32 sizes, then the elements.
// Only unsigned-byte elements are supported (all that MNIST-style sets use).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frugal/common/status.h"

namespace frugal::data {

struct IdxArray {
  std::vector<uint32_t> dims;
  std::vector<uint8_t> data;  // product(dims) elements
};

// Parses an uncompressed IDX buffer. Rejects a bad magic, an unsupported
// element type, a size that does not match the buffer exactly, and absurd
// dimensions.
Result<IdxArray> ParseIdx(const std::vector<uint8_t>& bytes);

// Reads a whole file; if `path` ends in ".gz" it is decompressed (zlib).
// A truncated or corrupt gzip stream is an error.
Result<std::vector<uint8_t>> ReadMaybeGzipFile(const std::string& path);

}  // namespace frugal::data
