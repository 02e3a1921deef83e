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

// Largest |v|: the bit patterns of finite non-negative floats order like the
// floats, and an integer max reduction vectorises where a float one may not.
float MaxAbs(const float* v, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    m = std::max(m, bits & 0x7fffffffu);
  }
  float f;
  std::memcpy(&f, &m, 4);
  return f;
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

// The code of v in a group of exponent e (not kZeroGroup), given inv = 2^-e.
// v * 2^-e is exact (a power of two; a result below 2^-126 rounds to code 0
// either way); beyond levels it saturates (only when e == kMaxCodeExponent).
int Code(float v, float inv, float levels) {
  return static_cast<int>(std::min(std::max(RoundHalfEven(v * inv), -levels), levels));
}

// Writes the codes of one group of n values with exponent e to dst
// (GroupCodeBytes(enc, n) bytes).
void PutGroupCodes(ValueEncoding enc, const float* v, size_t n, int e, uint8_t* dst) {
  if (e == kZeroGroup) {
    std::memset(dst, 0, GroupCodeBytes(enc, n));
    return;
  }
  const float inv = Pow2(-e), levels = static_cast<float>(Levels(enc));
  if (enc == ValueEncoding::kInt8) {
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>(static_cast<int8_t>(Code(v[i], inv, levels)));
    return;
  }
  size_t i = 0;
  for (; i + 1 < n; i += 2) {
    const auto lo = static_cast<uint8_t>(Code(v[i], inv, levels) & 0x0f);
    const auto hi = static_cast<uint8_t>(Code(v[i + 1], inv, levels) & 0x0f);
    dst[i / 2] = static_cast<uint8_t>(lo | (hi << 4));
  }
  if (i < n) dst[i / 2] = static_cast<uint8_t>(Code(v[i], inv, levels) & 0x0f);
}

// Reads one group of n codes at p (GroupCodeBytes + 1 bytes) into out.
Status ReadGroup(ValueEncoding enc, const uint8_t* p, size_t n, float* out) {
  const int e = static_cast<int8_t>(p[0]);
  const int levels = Levels(enc);
  if (e != kZeroGroup && (e < kMinCodeExponent || e > kMaxCodeExponent)) {
    return Status::Corruption("value group exponent " + std::to_string(e) + " outside [" +
                              std::to_string(kMinCodeExponent) + ", " + std::to_string(kMaxCodeExponent) + "]");
  }
  // |k| <= 127 and e <= kMaxCodeExponent keep every value finite.
  const float scale = e == kZeroGroup ? 0.0f : Pow2(e);
  const uint8_t* codes = p + 1;
  int max_code = 0;  // also catches -128 (int8) and -8 (int4), which are out of range
  if (enc == ValueEncoding::kInt8) {
    for (size_t i = 0; i < n; ++i) {
      const int k = static_cast<int8_t>(codes[i]);
      max_code = std::max(max_code, std::abs(k));
      out[i] = static_cast<float>(k) * scale;
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const auto nibble = static_cast<uint8_t>(codes[i / 2] >> (4 * (i % 2)));
      const int k = static_cast<int8_t>(static_cast<uint8_t>(nibble << 4)) >> 4;
      max_code = std::max(max_code, std::abs(k));
      out[i] = static_cast<float>(k) * scale;
    }
    if (n % 2 == 1 && (codes[n / 2] >> 4) != 0) return Status::Corruption("padding nibble is not zero");
  }
  if (max_code > levels) return Status::Corruption("value code beyond +-" + std::to_string(levels));
  if (e == kZeroGroup ? max_code != 0 : 2 * max_code <= levels) {
    return Status::Corruption("value group is not canonical (exponent " + std::to_string(e) + ", largest code " +
                              std::to_string(max_code) + ")");
  }
  return Status::Ok();
}

void PutLe(uint32_t bits, int bytes, uint8_t* dst) {
  for (int b = 0; b < bytes; ++b) dst[b] = static_cast<uint8_t>(bits >> (8 * b));
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
        if (exp == kZeroGroup) {
          std::fill(v + g, v + g + len, 0.0f);
          continue;
        }
        const float inv = Pow2(-exp), scale = Pow2(exp), levels = static_cast<float>(Levels(e));
        for (size_t i = g; i < g + len; ++i) v[i] = static_cast<float>(Code(v[i], inv, levels)) * scale;
      }
      return;
  }
}

void PutValues(ValueEncoding e, Span<const float> values, std::vector<uint8_t>* out) {
  const float* v = values.data();
  const size_t n = values.size();
  const size_t at = out->size();
  out->resize(at + ValueSectionBytes(e, n));
  uint8_t* dst = out->data() + at;
  if (IsIntegerCoded(e)) {
    for (size_t g = 0; g < n; g += kCodeGroup) {
      const size_t len = std::min(kCodeGroup, n - g);
      const int exp = GroupExponent(MaxAbs(v + g, len), Levels(e));
      *dst = static_cast<uint8_t>(static_cast<int8_t>(exp));
      PutGroupCodes(e, v + g, len, exp, dst + 1);
      dst += 1 + GroupCodeBytes(e, len);
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    if (e == ValueEncoding::kFp32) {
      uint32_t bits;
      std::memcpy(&bits, &v[i], 4);
      PutLe(bits, 4, dst + 4 * i);
    } else {
      PutLe(e == ValueEncoding::kFp16 ? FloatToHalf(v[i]) : FloatToBf16(v[i]), 2, dst + 2 * i);
    }
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
