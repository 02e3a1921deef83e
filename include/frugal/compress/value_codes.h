// Value sections of the wire codec (codec.h): how the nnz values of a sparse
// vector are written, and the rounding that tells error feedback exactly what
// the receivers will see.
//
// fp32, fp16, bf16: one value each (4, 2, 2 bytes; round-to-nearest-even).
//
// int8, int4: integer codes with a power-of-two scale, per group of
// kCodeGroup consecutive values (the last group may be shorter):
//   i8 exponent e | codes
// A value is k * 2^e, |k| <= L (L = 127 for int8, 7 for int4). int8 codes are
// one signed byte each; int4 codes are two's-complement nibbles, low nibble
// first, ceil(n/2) bytes per group of n (an odd group's last high nibble is 0).
// The encoder picks the smallest e with max|v| <= L * 2^e, so the largest
// |k| of a group is above L/2; e = -128 marks a group whose values are all 0
// (also used when max|v| < 2^kMinCodeExponent, too small to matter), and e
// is at most kMaxCodeExponent (larger values saturate to +-L * 2^e). These
// rules make the encoding canonical: decoding and re-encoding gives the same
// bytes, and the decoder rejects anything else.
//
// Why powers of two: k * 2^e is exact, and acc - k * 2^e is exact whenever k
// != 0 (Sterbenz: the two are within a factor of 2), so error feedback keeps
// acc = sent + residual bit for bit (error_feedback.h).
//
// Thread safety: free functions without shared state.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>
#include "frugal/common/span.h"
#include "frugal/common/status.h"

namespace frugal::compress {

enum class ValueEncoding : uint8_t { kFp32 = 0, kFp16 = 1, kBf16 = 2, kInt8 = 3, kInt4 = 4 };
inline constexpr uint8_t kMaxValueEncoding = 4;

// Values sharing one exponent in int8 / int4.
inline constexpr size_t kCodeGroup = 256;
// Smallest exponent written; smaller groups are sent as zeros.
inline constexpr int kMinCodeExponent = -120;
// Largest exponent; values beyond L * 2^100 (about 1e32) saturate to it, as
// fp16 saturates at 65504.
inline constexpr int kMaxCodeExponent = 100;

// Bytes of the value section for nnz values.
uint64_t ValueSectionBytes(ValueEncoding e, uint64_t nnz);
// Average wire bytes per value (for cost models).
double BytesPerValue(ValueEncoding e);
// True for int8 / int4.
bool IsIntegerCoded(ValueEncoding e);

// Replaces every value by what a receiver decodes for it (identity for fp32).
// REQUIRES: finite values.
void RoundToWire(ValueEncoding e, Span<float> values);
// Appends the value section. REQUIRES: finite values.
void PutValues(ValueEncoding e, Span<const float> values, std::vector<uint8_t>* out);
// Decodes a value section of exactly ValueSectionBytes(e, out.size()) bytes.
// Returns Corruption for non-canonical or non-finite input.
Status ReadValues(ValueEncoding e, Span<const uint8_t> section, Span<float> out);

}  // namespace frugal::compress
