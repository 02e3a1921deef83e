#include "frugal/compress/value_codes.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "frugal/compress/codec.h"

namespace frugal::compress {
namespace {

constexpr int8_t kZeroGroup = -128;

int Levels(ValueEncoding e) { return e == ValueEncoding::kInt8 ? 127 : 7; }

uint64_t GroupCodeBytes(ValueEncoding e, uint64_t n) { return e == ValueEncoding::kInt8 ? n : (n + 1) / 2; }

// Smallest e with max_abs <= levels * 2^e, or kZeroGroup.
int GroupExponent(float max_abs, int levels) {
  if (!(max_abs > 0.0f)) return kZeroGroup;
  int e;
  std::frexp(max_abs / static_cast<float>(levels), &e);
  // The division rounds; settle e exactly with exact power-of-two products.
  while (std::ldexp(static_cast<float>(levels), e - 1) >= max_abs) --e;
  while (std::ldexp(static_cast<float>(levels), e) < max_abs) ++e;
  return e < kMinCodeExponent ? kZeroGroup : std::min(e, kMaxCodeExponent);
}

float MaxAbs(const float* v, size_t n) {
  float m = 0.0f;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(v[i]));
  return m;
}

// 2^e as a float. REQUIRES: -126 <= e <= 127 (every exponent used here is).
float Pow2(int e) {
  const uint32_t bits = static_cast<uint32_t>(e + 127) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round half to even for |y| < 2^22 without a libm call: adding 1.5 * 2^23
// leaves no fraction bits, so the addition itself rounds (in the default
// rounding mode, which nearbyint would use too).
float RoundHalfEven(float y) {
  constexpr float kMagic = 12582912.0f;
  return (y + kMagic) - kMagic;
}

// REQUIRES: |v| <= levels * 2^e unless e == kMaxCodeExponent (then it saturates).
// v * 2^-e is exact (a power of two, no overflow or underflow that matters:
// a result below 2^-126 rounds to code 0 either way).
int Code(float v, int e, int levels) {
  if (e == kZeroGroup) return 0;
  const float k = RoundHalfEven(v * Pow2(-e));
  return static_cast<int>(std::clamp(k, -static_cast<float>(levels), static_cast<float>(levels)));
}

float CodeValue(int k, int e) { return e == kZeroGroup ? 0.0f : static_cast<float>(k) * Pow2(e); }

void PutGroup(ValueEncoding enc, const float* v, size_t n, std::vector<uint8_t>* out) {
  const int e = GroupExponent(MaxAbs(v, n), Levels(enc));
  out->push_back(static_cast<uint8_t>(static_cast<int8_t>(e)));
  if (enc == ValueEncoding::kInt8) {
    for (size_t i = 0; i < n; ++i) out->push_back(static_cast<uint8_t>(static_cast<int8_t>(Code(v[i], e, Levels(enc)))));
    return;
  }
  for (size_t i = 0; i < n; i += 2) {
    uint8_t lo = static_cast<uint8_t>(Code(v[i], e, Levels(enc))) & 0x0f;
    uint8_t hi = i + 1 < n ? static_cast<uint8_t>(Code(v[i + 1], e, Levels(enc))) & 0x0f : 0;
    out->push_back(static_cast<uint8_t>(lo | (hi << 4)));
  }
}

int Nibble(uint8_t b) { return (b & 0x8) ? static_cast<int>(b) - 16 : b; }

// Reads one group of n codes at p (GroupCodeBytes + 1 bytes) into out.
Status ReadGroup(ValueEncoding enc, const uint8_t* p, size_t n, float* out) {
  const int e = static_cast<int8_t>(p[0]);
  const int levels = Levels(enc);
  if (e != kZeroGroup && (e < kMinCodeExponent || e > kMaxCodeExponent)) {
    return Status::Corruption("value group exponent " + std::to_string(e) + " outside [" +
                              std::to_string(kMinCodeExponent) + ", " + std::to_string(kMaxCodeExponent) + "]");
  }
  int max_code = 0;
  for (size_t i = 0; i < n; ++i) {
    int k = enc == ValueEncoding::kInt8 ? static_cast<int8_t>(p[1 + i])
                                         : Nibble(static_cast<uint8_t>((p[1 + i / 2] >> (4 * (i % 2))) & 0x0f));
    if (k < -levels || k > levels) return Status::Corruption("value code " + std::to_string(k) + " out of range");
    max_code = std::max(max_code, std::abs(k));
    out[i] = CodeValue(k, e);
    if (!std::isfinite(out[i])) return Status::Corruption("value code overflows fp32");
  }
  if (enc == ValueEncoding::kInt4 && n % 2 == 1 && (p[1 + n / 2] >> 4) != 0) {
    return Status::Corruption("padding nibble is not zero");
  }
  if (e == kZeroGroup ? max_code != 0 : 2 * max_code <= levels) {
    return Status::Corruption("value group is not canonical (exponent " + std::to_string(e) + ", largest code " +
                              std::to_string(max_code) + ")");
  }
  return Status::Ok();
}

}  // namespace

bool IsIntegerCoded(ValueEncoding e) { return e == ValueEncoding::kInt8 || e == ValueEncoding::kInt4; }

uint64_t ValueSectionBytes(ValueEncoding e, uint64_t nnz) {
  switch (e) {
    case ValueEncoding::kFp32:
      return 4 * nnz;
    case ValueEncoding::kFp16:
    case ValueEncoding::kBf16:
      return 2 * nnz;
    case ValueEncoding::kInt8:
    case ValueEncoding::kInt4: {
      const uint64_t full = nnz / kCodeGroup, rest = nnz % kCodeGroup;
      return full * (1 + GroupCodeBytes(e, kCodeGroup)) + (rest ? 1 + GroupCodeBytes(e, rest) : 0);
    }
  }
  return 0;
}

double BytesPerValue(ValueEncoding e) {
  return static_cast<double>(ValueSectionBytes(e, kCodeGroup)) / static_cast<double>(kCodeGroup);
}

void RoundToWire(ValueEncoding e, Span<float> values) {
  float* v = values.data();
  const size_t n = values.size();
  switch (e) {
    case ValueEncoding::kFp32:
      return;
    case ValueEncoding::kFp16:
      for (size_t i = 0; i < n; ++i) v[i] = HalfToFloat(FloatToHalf(v[i]));
      return;
    case ValueEncoding::kBf16:
      for (size_t i = 0; i < n; ++i) v[i] = Bf16ToFloat(FloatToBf16(v[i]));
      return;
    case ValueEncoding::kInt8:
    case ValueEncoding::kInt4:
      for (size_t g = 0; g < n; g += kCodeGroup) {
        const size_t len = std::min(kCodeGroup, n - g);
        const int exp = GroupExponent(MaxAbs(v + g, len), Levels(e));
        for (size_t i = g; i < g + len; ++i) v[i] = CodeValue(Code(v[i], exp, Levels(e)), exp);
      }
      return;
  }
}

void PutValues(ValueEncoding e, Span<const float> values, std::vector<uint8_t>* out) {
  const float* v = values.data();
  const size_t n = values.size();
  if (IsIntegerCoded(e)) {
    for (size_t g = 0; g < n; g += kCodeGroup) PutGroup(e, v + g, std::min(kCodeGroup, n - g), out);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    if (e == ValueEncoding::kFp32) {
      std::memcpy(&bits, &v[i], 4);
      for (int b = 0; b < 4; ++b) out->push_back(static_cast<uint8_t>(bits >> (8 * b)));
      continue;
    }
    bits = e == ValueEncoding::kFp16 ? FloatToHalf(v[i]) : FloatToBf16(v[i]);
    out->push_back(static_cast<uint8_t>(bits));
    out->push_back(static_cast<uint8_t>(bits >> 8));
  }
}

Status ReadValues(ValueEncoding e, Span<const uint8_t> section, Span<float> out) {
  const uint8_t* p = section.data();
  const size_t n = out.size();
  if (section.size() != ValueSectionBytes(e, n)) return Status::Corruption("value section has the wrong length");
  if (IsIntegerCoded(e)) {
    for (size_t g = 0; g < n; g += kCodeGroup) {
      const size_t len = std::min(kCodeGroup, n - g);
      Status st = ReadGroup(e, p, len, out.data() + g);
      if (!st.ok()) return st.WithContext("value group " + std::to_string(g / kCodeGroup));
      p += 1 + GroupCodeBytes(e, len);
    }
    return Status::Ok();
  }
  for (size_t j = 0; j < n; ++j) {
    float f;
    if (e == ValueEncoding::kFp32) {
      uint32_t u = uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
      std::memcpy(&f, &u, 4);
      p += 4;
    } else {
      uint16_t h = static_cast<uint16_t>(p[0] | (p[1] << 8));
      f = e == ValueEncoding::kFp16 ? HalfToFloat(h) : Bf16ToFloat(h);
      p += 2;
    }
    if (!std::isfinite(f)) return Status::Corruption("value " + std::to_string(j) + " is not finite");
    out.data()[j] = f;
  }
  return Status::Ok();
}

}  // namespace frugal::compress
