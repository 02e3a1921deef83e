#include "frugal/compress/value_codes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "frugal/compress/codec.h"
#include "frugal/compress/error_feedback.h"

namespace frugal::compress {
namespace {

std::vector<uint8_t> Section(ValueEncoding e, const std::vector<float>& v) {
  std::vector<uint8_t> out;
  PutValues(e, Span<const float>(v.data(), v.size()), &out);
  return out;
}

Status Read(ValueEncoding e, const std::vector<uint8_t>& bytes, size_t n, std::vector<float>* out) {
  out->assign(n, 0.0f);
  return ReadValues(e, Span<const uint8_t>(bytes.data(), bytes.size()), Span<float>(out->data(), n));
}

TEST(ValueCodes, SizesPerEncoding) {
  EXPECT_EQ(ValueSectionBytes(ValueEncoding::kFp32, 10), 40u);
  EXPECT_EQ(ValueSectionBytes(ValueEncoding::kFp16, 10), 20u);
  EXPECT_EQ(ValueSectionBytes(ValueEncoding::kInt8, 0), 0u);
  EXPECT_EQ(ValueSectionBytes(ValueEncoding::kInt8, 300), 302u);  // two groups: 256 + 44 codes, 2 exponents
  EXPECT_EQ(ValueSectionBytes(ValueEncoding::kInt4, 300), 1 + 128 + 1 + 22u);
  EXPECT_EQ(ValueSectionBytes(ValueEncoding::kInt4, 3), 1 + 2u);
  EXPECT_DOUBLE_EQ(BytesPerValue(ValueEncoding::kInt8), 257.0 / 256.0);
  EXPECT_DOUBLE_EQ(BytesPerValue(ValueEncoding::kInt4), 129.0 / 256.0);
}

// The format written the plain way (frexp/ldexp/nearbyint, one value at a
// time), to hold the fast encoder to the specification in value_codes.h.
std::vector<uint8_t> ReferenceSection(ValueEncoding e, const std::vector<float>& v) {
  const int levels = e == ValueEncoding::kInt8 ? 127 : 7;
  std::vector<uint8_t> out;
  for (size_t g = 0; g < v.size(); g += kCodeGroup) {
    const size_t n = std::min(kCodeGroup, v.size() - g);
    float max_abs = 0.0f;
    for (size_t i = g; i < g + n; ++i) max_abs = std::max(max_abs, std::fabs(v[i]));
    int exp = -128;
    if (max_abs > 0.0f) {
      exp = kMinCodeExponent - 1;
      while (std::ldexp(static_cast<double>(levels), exp) < max_abs && exp < kMaxCodeExponent) ++exp;
      if (exp < kMinCodeExponent) exp = -128;
    }
    out.push_back(static_cast<uint8_t>(static_cast<int8_t>(exp)));
    std::vector<int> k(n, 0);
    for (size_t i = 0; exp != -128 && i < n; ++i) {
      const double c = std::nearbyint(std::ldexp(static_cast<double>(v[g + i]), -exp));
      k[i] = static_cast<int>(std::clamp(c, -static_cast<double>(levels), static_cast<double>(levels)));
    }
    for (size_t i = 0; i < n; ++i) {
      if (e == ValueEncoding::kInt8) {
        out.push_back(static_cast<uint8_t>(static_cast<int8_t>(k[i])));
      } else if (i % 2 == 0) {
        out.push_back(static_cast<uint8_t>(k[i] & 0x0f));
      } else {
        out.back() = static_cast<uint8_t>(out.back() | ((k[i] & 0x0f) << 4));
      }
    }
  }
  return out;
}

TEST(ValueCodes, EncoderMatchesAPlainReferenceOnRandomGroups) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> scale_exp(-130, 110);
  for (ValueEncoding e : {ValueEncoding::kInt8, ValueEncoding::kInt4}) {
    for (size_t n : {1u, 2u, 255u, 256u, 257u, 1001u}) {
      for (int trial = 0; trial < 20; ++trial) {
        std::vector<float> v(n);
        const float scale = std::ldexp(1.0f, scale_exp(rng));
        for (float& x : v) x = unit(rng) * scale;
        if (trial % 5 == 0) v[n / 2] = 0.0f;
        ASSERT_EQ(Section(e, v), ReferenceSection(e, v)) << "n " << n << " trial " << trial;
        std::vector<float> got;
        ASSERT_TRUE(Read(e, Section(e, v), n, &got).ok());
        std::vector<float> rounded = v;
        RoundToWire(e, Span<float>(rounded.data(), rounded.size()));
        ASSERT_EQ(got, rounded);
      }
    }
  }
}

TEST(ValueCodes, PowerOfTwoScaleAndExactCodes) {
  // max 1.0 with 127 levels: smallest e with 1 <= 127 * 2^e is -6 (127/64 ~ 1.98; 127/128 < 1).
  std::vector<float> v = {1.0f, -0.5f, 0.0078125f, 0.00390625f, 0.0f};
  std::vector<float> q = v;
  RoundToWire(ValueEncoding::kInt8, Span<float>(q.data(), q.size()));
  EXPECT_EQ(q[0], 1.0f);     // 64 * 2^-6
  EXPECT_EQ(q[1], -0.5f);    // -32 * 2^-6
  EXPECT_EQ(q[2], 0.0f);     // 0.5 * 2^-6 is a tie: rounds to even 0
  EXPECT_EQ(q[3], 0.0f);
  std::vector<uint8_t> bytes = Section(ValueEncoding::kInt8, v);
  ASSERT_EQ(bytes.size(), 6u);
  EXPECT_EQ(static_cast<int8_t>(bytes[0]), -6);
  EXPECT_EQ(static_cast<int8_t>(bytes[1]), 64);
  std::vector<float> got;
  ASSERT_TRUE(Read(ValueEncoding::kInt8, bytes, v.size(), &got).ok());
  EXPECT_EQ(got, q);
}

TEST(ValueCodes, ExtremeMagnitudesRoundTrip) {
  for (ValueEncoding e : {ValueEncoding::kInt8, ValueEncoding::kInt4}) {
    std::vector<float> v = {3.0e38f, -1.0e38f, 1.0f};
    std::vector<float> tiny = {1e-37f, -1e-38f, 1e-45f};  // below 2^-120 * levels: a zero group
    for (const auto& values : {v, tiny}) {
      std::vector<float> q = values;
      RoundToWire(e, Span<float>(q.data(), q.size()));
      std::vector<float> got;
      Status st = Read(e, Section(e, values), values.size(), &got);
      ASSERT_TRUE(st.ok()) << st.ToString();
      EXPECT_EQ(got, q);
      for (float f : got) EXPECT_TRUE(std::isfinite(f));
      EXPECT_EQ(Section(e, got), Section(e, values));  // saturated groups stay canonical
    }
  }
}

TEST(ValueCodes, RejectsNonCanonicalGroups) {
  std::vector<float> got;
  // int8, one value: exponent 0, code 1 (largest code 1 <= 127/2: e was not the smallest).
  EXPECT_FALSE(Read(ValueEncoding::kInt8, {0x00, 0x01}, 1, &got).ok());
  // Zero-group marker with a non-zero code.
  EXPECT_FALSE(Read(ValueEncoding::kInt8, {0x80, 0x40}, 1, &got).ok());
  // Code -128 is outside [-127, 127].
  EXPECT_FALSE(Read(ValueEncoding::kInt8, {0x00, 0x80}, 1, &got).ok());
  // Exponent below the smallest written.
  EXPECT_FALSE(Read(ValueEncoding::kInt8, {static_cast<uint8_t>(-121), 0x7f}, 1, &got).ok());
  // int4: nibble 8 (-8) is outside [-7, 7]; a non-zero padding nibble.
  EXPECT_FALSE(Read(ValueEncoding::kInt4, {0x00, 0x08}, 1, &got).ok());
  EXPECT_FALSE(Read(ValueEncoding::kInt4, {0x00, 0x17}, 1, &got).ok());
  EXPECT_TRUE(Read(ValueEncoding::kInt4, {0x00, 0x07}, 1, &got).ok());
  EXPECT_EQ(got[0], 7.0f);
  // Wrong length, and an exponent above the largest written.
  EXPECT_FALSE(Read(ValueEncoding::kInt8, {0x00, 0x7f, 0x00}, 1, &got).ok());
  EXPECT_FALSE(Read(ValueEncoding::kInt8, {101, 0x7f}, 1, &got).ok());
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

TEST(ValueCodes, ErrorFeedbackKeepsTheRoundingErrorExactly) {
  const size_t n = 20011;
  for (ValueEncoding e : {ValueEncoding::kFp16, ValueEncoding::kBf16, ValueEncoding::kInt8, ValueEncoding::kInt4}) {
    for (const char* kind : {"block", "sampled_topk"}) {
      auto sparsifier = std::move(CreateSparsifier(kind).value());
      ErrorFeedbackOptions options;
      options.wire_values = e;
      ErrorFeedback ef(n, options);
      std::mt19937 rng(7);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      size_t kept = 0;
      for (int step = 0; step < 15; ++step) {
        std::vector<float> g(n);
        for (float& x : g) x = normal(rng) * std::exp(normal(rng));
        std::vector<float> old(ef.residual().begin(), ef.residual().end());
        SparseVector sent;
        ASSERT_TRUE(ef.Compress(g, *sparsifier, 0.03, &sent).ok());
        // What was sent is exactly what the wire delivers.
        std::vector<uint8_t> bytes;
        ASSERT_TRUE(Encode(sent, {e, IndexEncoding::kAbsoluteU32}, &bytes).ok());
        SparseVector wire;
        ASSERT_TRUE(Decode(bytes, DecodeLimits{}, &wire).ok());
        ASSERT_EQ(wire.values, sent.values);
        std::vector<float> dense(n);
        Densify(sent, dense);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_TRUE(SameBits(dense[i] + ef.residual()[i], old[i] + g[i])) << kind << " step " << step << " i " << i;
        }
        for (uint32_t i : sent.indices) kept += ef.residual()[i] != 0.0f;
      }
      EXPECT_GT(kept, 0u) << "rounding error is kept in the residual";
    }
  }
}

}  // namespace
}  // namespace frugal::compress
