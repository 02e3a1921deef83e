// Internal: the one-pass threshold scan of the `sampled_topk` sparsifier, one
// implementation per instruction set, picked at run time.
//
// Note [Magnitude keys]
// A value's magnitude key is its bit pattern with the sign bit cleared. For
// non-negative IEEE floats, unsigned order of the bit patterns is numeric
// order (denormals included, +0 and -0 both key 0), Inf is 0x7f800000 and
// every NaN is above it. So the scan compares integers, every path makes
// exactly the same decisions (no rounding anywhere), and the largest key seen
// tells both whether everything was finite and the range of the candidates.
#pragma once

#include <cstddef>
#include <cstdint>

#include "frugal/compress/sparsifier.h"

namespace frugal::compress::internal {

inline constexpr uint32_t kSignMask = 0x7fffffffu;
inline constexpr uint32_t kInfKey = 0x7f800000u;

inline uint32_t MagnitudeKey(float v) {
  uint32_t bits;
  __builtin_memcpy(&bits, &v, sizeof(bits));
  return bits & kSignMask;
}

// The scan works in chunks of this many values and checks the cap once per
// chunk (and the vector paths store whole registers), so the output arrays
// need this many entries of room past the cap.
inline constexpr size_t kScanSlack = 32;

struct ScanResult {
  size_t count = 0;       // entries appended
  uint32_t max_key = 0;   // largest key seen (>= kInfKey: a NaN or Inf); partial after overflow
  bool overflow = false;  // count passed the cap; the scan stopped early
};

// Appends (id, raw bits) of every value of x[0, n) with key >= lo to ids /
// bits, ids increasing; stops once more than `cap` were appended.
// REQUIRES: lo <= kInfKey, n < 2^32, ids and bits have cap + kScanSlack entries.
using MagnitudeScanFn = ScanResult (*)(const float* x, size_t n, uint32_t lo, uint32_t* ids, uint32_t* bits,
                                       size_t cap);

ScanResult MagnitudeScanScalar(const float* x, size_t n, uint32_t lo, uint32_t* ids, uint32_t* bits, size_t cap);
#if defined(__x86_64__)
ScanResult MagnitudeScanAvx2(const float* x, size_t n, uint32_t lo, uint32_t* ids, uint32_t* bits, size_t cap);
ScanResult MagnitudeScanAvx512(const float* x, size_t n, uint32_t lo, uint32_t* ids, uint32_t* bits, size_t cap);
#endif

// The kernel for `level` (kAuto = best available). Returns nullptr if the CPU
// lacks the requested instruction set.
MagnitudeScanFn GetMagnitudeScanFn(SimdLevel level);

}  // namespace frugal::compress::internal
