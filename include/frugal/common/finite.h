// Whether float buffers hold only finite values: the one check behind the
// NaN/Inf errors of the sparsifiers, error feedback and the optimizers.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "frugal/common/span.h"

namespace frugal {

// True when no value is NaN or infinite. An integer test of the exponent
// field, OR-reduced without an early exit, so that it vectorises; a loop
// over std::isfinite with a branch per value runs about 4x slower and was
// the largest CPU cost of a dense optimizer step.
inline bool AllFinite(Span<const float> values) {
  const float* p = values.data();
  const size_t n = values.size();
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + i, sizeof bits);
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

// The index of the first NaN or infinity, or values.size() when there is
// none (for the message once AllFinite said false).
inline size_t FirstNonFinite(Span<const float> values) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) return i;
  }
  return values.size();
}

}  // namespace frugal
