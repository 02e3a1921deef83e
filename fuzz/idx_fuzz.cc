// libFuzzer target: the Fashion-MNIST idx reader (data/idx.h), plain and
// gzip-compressed. Input: a selector byte, then the file. Odd selectors go
// through ReadMaybeGzipFile on a ".gz" scratch file (zlib), even ones
// straight to ParseIdx. An accepted array must hold product(dims) bytes.
#include "frugal/data/idx.h"
#include "fuzz_input.h"

namespace {

void Parse(const std::vector<uint8_t>& bytes) {
  auto idx = frugal::data::ParseIdx(bytes);
  if (!idx.ok()) return;
  uint64_t n = 1;
  for (uint32_t d : idx->dims) n *= d;
  FRUGAL_FUZZ_CHECK(!idx->dims.empty() && idx->data.size() == n);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  frugal::fuzz::Input in(data, size);
  if (in.Byte() % 2 == 0) {
    Parse(in.RestAsBytes());
    return 0;
  }
  auto bytes = frugal::data::ReadMaybeGzipFile(frugal::fuzz::TempFile(in.RestAsString(), ".gz"));
  if (bytes.ok()) Parse(*bytes);
  return 0;
}
