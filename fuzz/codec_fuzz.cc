// libFuzzer target for the wire decoder: any input must either decode to a
// valid SparseVector that re-encodes to exactly the same bytes (the format is
// canonical) or be rejected with a Status. Crashes, sanitizer reports and
// round-trip mismatches are bugs.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "frugal/compress/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace frugal::compress;
  DecodeLimits limits;
  limits.max_nnz = 1 << 20;  // Keep single inputs cheap; the limit check itself is what is tested.
  SparseVector v;
  frugal::Status st = Decode(frugal::Span<const uint8_t>(data, size), limits, &v);
  if (!st.ok()) {
    if (v.nnz() != 0 || v.dense_size != 0) __builtin_trap();
    return 0;
  }
  if (!ValidateSparseVector(v).ok()) __builtin_trap();
  WireFormat format{static_cast<ValueEncoding>(data[5]), static_cast<IndexEncoding>(data[6])};
  std::vector<uint8_t> again;
  if (!Encode(v, format, &again).ok()) __builtin_trap();
  if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  return 0;
}
