// libFuzzer target for the wire decoder: any input must either decode to a
// valid SparseVector that re-encodes to exactly the same bytes (the format is
// canonical) or be rejected with a Status. Crashes, sanitizer reports and
// round-trip mismatches are bugs. A deflated value section (flag bit 1) is
// canonical up to its zlib stream, which other encoders may write otherwise:
// there the re-encoding must decode to the same vector.
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
  const bool deflated = (data[7] & 2) != 0;
  WireFormat format{static_cast<ValueEncoding>(data[5]), static_cast<IndexEncoding>(data[6]), deflated};
  std::vector<uint8_t> again;
  if (!Encode(v, format, &again).ok()) __builtin_trap();
  if (!deflated) {
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
    return 0;
  }
  SparseVector back;
  if (!Decode(frugal::Span<const uint8_t>(again.data(), again.size()), limits, &back).ok()) __builtin_trap();
  if (back.dense_size != v.dense_size || back.indices != v.indices || back.values != v.values) __builtin_trap();
  return 0;
}
