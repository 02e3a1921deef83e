#include "frugal/compress/codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include <zlib.h>

namespace frugal::compress {
namespace {

SparseVector RandomSparse(uint64_t dense, size_t nnz, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<char> taken(dense, 0);
  SparseVector v;
  v.dense_size = dense;
  std::uniform_int_distribution<uint64_t> pick(0, dense - 1);
  while (v.indices.size() < nnz) {
    uint64_t i = pick(rng);
    if (!taken[i]) {
      taken[i] = 1;
      v.indices.push_back(static_cast<uint32_t>(i));
    }
  }
  std::sort(v.indices.begin(), v.indices.end());
  std::normal_distribution<float> val(0.0f, 1.0f);
  for (size_t j = 0; j < nnz; ++j) v.values.push_back(val(rng));
  return v;
}

// Blocks 0, 2 and the short tail block of a 37-element tensor.
SparseVector BlockSparse() {
  SparseVector v;
  v.dense_size = 37;
  for (uint32_t i = 0; i < 16; ++i) v.indices.push_back(i);
  for (uint32_t i = 32; i < 37; ++i) v.indices.push_back(i);
  for (size_t j = 0; j < v.indices.size(); ++j) v.values.push_back(0.25f * static_cast<float>(j) - 2.0f);
  return v;
}

// What the wire carries for v's values: per value for fp32/16, per group of
// kCodeGroup for integer codes (checked against an error bound, since the
// expected values come from the same rounding code).
std::vector<float> Quantize(const SparseVector& v, ValueEncoding e) {
  std::vector<float> q = v.values;
  if (!IsIntegerCoded(e)) {
    for (float& f : q) f = e == ValueEncoding::kFp32 ? f : e == ValueEncoding::kFp16 ? HalfToFloat(FloatToHalf(f))
                                                                                     : Bf16ToFloat(FloatToBf16(f));
    return q;
  }
  RoundToWire(e, Span<float>(q.data(), q.size()));
  const float levels = e == ValueEncoding::kInt8 ? 127.0f : 7.0f;
  for (size_t g = 0; g < q.size(); g += kCodeGroup) {
    float max_abs = 0;
    for (size_t j = g; j < std::min(q.size(), g + kCodeGroup); ++j) max_abs = std::max(max_abs, std::fabs(v.values[j]));
    for (size_t j = g; j < std::min(q.size(), g + kCodeGroup); ++j) {
      EXPECT_LE(std::fabs(q[j] - v.values[j]), max_abs / levels) << j;  // half a step, step <= 2 max/levels
    }
  }
  return q;
}

class CodecRoundTrip : public ::testing::TestWithParam<std::tuple<ValueEncoding, IndexEncoding>> {};

TEST_P(CodecRoundTrip, DecodesWhatWasEncoded) {
  auto [venc, ienc] = GetParam();
  std::vector<SparseVector> cases;
  cases.push_back(BlockSparse());
  SparseVector empty;
  empty.dense_size = 0;
  cases.push_back(empty);
  if (!IsBlockIndexed(ienc)) {
    cases.push_back(RandomSparse(1, 1, 1));
    cases.push_back(RandomSparse(1000, 17, 2));
    cases.push_back(RandomSparse(5000000, 3000, 3));  // gaps needing multi-byte varints
  }
  for (const SparseVector& v : cases) {
    std::vector<uint8_t> bytes;
    ASSERT_TRUE(Encode(v, {venc, ienc}, &bytes).ok());
    EXPECT_EQ(bytes.size(), EncodedSize(v, {venc, ienc}));
    SparseVector got;
    Status st = Decode(bytes, DecodeLimits{}, &got);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(got.dense_size, v.dense_size);
    EXPECT_EQ(got.indices, v.indices);
    ASSERT_EQ(got.values.size(), v.values.size());
    std::vector<float> want = Quantize(v, venc);
    for (size_t j = 0; j < v.values.size(); ++j) EXPECT_EQ(got.values[j], want[j]);
    std::vector<uint8_t> again;  // canonical: decoded values encode to the same bytes
    ASSERT_TRUE(Encode(got, {venc, ienc}, &again).ok());
    EXPECT_EQ(again, bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(AllEncodings, CodecRoundTrip,
                         ::testing::Combine(::testing::Values(ValueEncoding::kFp32, ValueEncoding::kFp16,
                                                              ValueEncoding::kBf16, ValueEncoding::kInt8,
                                                              ValueEncoding::kInt4),
                                            ::testing::Values(IndexEncoding::kAbsoluteU32,
                                                              IndexEncoding::kDeltaVarint,
                                                              IndexEncoding::kBlockId,
                                                              IndexEncoding::kBlockVarint)));

TEST(Codec, HalfConversionMatchesHardwareRounding) {
  // Hand-checked values: exact, round-to-even ties, subnormals, saturation.
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(1e9f), 0x7bff);
  EXPECT_EQ(FloatToHalf(5.9604644775390625e-8f), 0x0001);  // 2^-24, smallest subnormal
  EXPECT_EQ(FloatToHalf(2.98023223876953125e-8f), 0x0000);  // 2^-25 ties to even (zero)
  EXPECT_EQ(FloatToHalf(1.0f + 1.0f / 2048), 0x3c00);      // tie, rounds to even
  EXPECT_EQ(FloatToHalf(1.0f + 3.0f / 2048), 0x3c02);      // tie, rounds up to even
  EXPECT_EQ(HalfToFloat(0x0001), 5.9604644775390625e-8f);
  // Every finite half survives half -> float -> half.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;
    ASSERT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))), h) << h;
  }
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f + 1.0f / 256), 0x3f80);   // tie to even
  EXPECT_EQ(FloatToBf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_EQ(FloatToBf16(3.4e38f), 0x7f7f);             // saturates instead of Inf
}

TEST(Codec, VarintIsCompact) {
  SparseVector v;
  v.dense_size = 1000;
  for (uint32_t i = 0; i < 100; ++i) {
    v.indices.push_back(i * 3);
    v.values.push_back(1.0f);
  }
  // 1 byte per index instead of 4.
  EXPECT_EQ(EncodedSize(v, {ValueEncoding::kFp32, IndexEncoding::kDeltaVarint}) + 300,
            EncodedSize(v, {ValueEncoding::kFp32, IndexEncoding::kAbsoluteU32}) + 8);
}

TEST(Codec, EncodeRejectsBrokenInput) {
  std::vector<uint8_t> out;
  SparseVector unsorted;
  unsorted.dense_size = 10;
  unsorted.indices = {3, 2};
  unsorted.values = {1, 1};
  EXPECT_FALSE(Encode(unsorted, {}, &out).ok());
  SparseVector nan;
  nan.dense_size = 10;
  nan.indices = {1};
  nan.values = {std::nanf("")};
  EXPECT_FALSE(Encode(nan, {}, &out).ok());
  SparseVector partial_block;
  partial_block.dense_size = 64;
  for (uint32_t i = 16; i < 31; ++i) {
    partial_block.indices.push_back(i);
    partial_block.values.push_back(1.0f);
  }
  EXPECT_FALSE(Encode(partial_block, {ValueEncoding::kFp32, IndexEncoding::kBlockId}, &out).ok());
  EXPECT_FALSE(Encode(partial_block, {ValueEncoding::kFp32, IndexEncoding::kBlockVarint}, &out).ok());
}

TEST(Codec, VarintBlockIdsTakeAByteAGapBelow128) {
  // 100 blocks, every 3rd (gaps of 3 blocks), then one gap of 200 blocks.
  SparseVector v;
  v.dense_size = 16 * 600;
  for (uint32_t b = 0; b < 100; ++b) {
    for (uint32_t i = 0; i < 16; ++i) v.indices.push_back(16 * 3 * b + i);
  }
  for (uint32_t i = 0; i < 16; ++i) v.indices.push_back(16 * (3 * 99 + 200) + i);
  v.values.assign(v.indices.size(), 1.0f);
  const size_t u32_ids = EncodedSize(v, {ValueEncoding::kFp32, IndexEncoding::kBlockId});
  const size_t varint_ids = EncodedSize(v, {ValueEncoding::kFp32, IndexEncoding::kBlockVarint});
  EXPECT_EQ(varint_ids + 4 * 101, u32_ids + 8 + 100 + 2);  // u64 length, 100 one-byte ids, one two-byte gap
  EXPECT_DOUBLE_EQ(IndexBytesPerValue(IndexEncoding::kBlockVarint, 0.03), 1.0 / 16);
  EXPECT_DOUBLE_EQ(IndexBytesPerValue(IndexEncoding::kBlockVarint, 0.005), 2.0 / 16);
  EXPECT_DOUBLE_EQ(IndexBytesPerValue(IndexEncoding::kBlockId, 0.03), 4.0 / 16);
}

std::vector<uint8_t> Valid(IndexEncoding ienc) {
  std::vector<uint8_t> bytes;
  EXPECT_TRUE(Encode(BlockSparse(), {ValueEncoding::kFp16, ienc}, &bytes).ok());
  return bytes;
}

void ExpectCorrupt(const std::vector<uint8_t>& bytes, const std::string& what) {
  SparseVector out;
  out.dense_size = 99;
  out.indices = {1};
  out.values = {1};
  Status st = Decode(bytes, DecodeLimits{}, &out);
  EXPECT_EQ(st.code(), Status::Code::kCorruption) << what;
  EXPECT_EQ(out.nnz(), 0u) << what;
  EXPECT_EQ(out.dense_size, 0u) << what;
}

TEST(Codec, DecodeRejectsEveryTruncation) {
  for (auto ienc : {IndexEncoding::kAbsoluteU32, IndexEncoding::kDeltaVarint, IndexEncoding::kBlockId,
                    IndexEncoding::kBlockVarint}) {
    std::vector<uint8_t> bytes = Valid(ienc);
    for (size_t len = 0; len < bytes.size(); ++len) {
      ExpectCorrupt(std::vector<uint8_t>(bytes.begin(), bytes.begin() + len), "truncated to " + std::to_string(len));
    }
    std::vector<uint8_t> longer = bytes;
    longer.push_back(0);
    ExpectCorrupt(longer, "trailing byte");
  }
}

void PokeU64(std::vector<uint8_t>* b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) (*b)[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

TEST(Codec, DecodeRejectsMalformedHeaders) {
  std::vector<uint8_t> b = Valid(IndexEncoding::kAbsoluteU32);
  auto bad = b;
  bad[0] ^= 1;
  ExpectCorrupt(bad, "magic");
  bad = b;
  bad[4] = 2;
  ExpectCorrupt(bad, "version");
  bad = b;
  bad[5] = 3;
  ExpectCorrupt(bad, "value encoding");
  bad = b;
  bad[6] = 7;
  ExpectCorrupt(bad, "index encoding");
  bad = b;
  bad[7] = 1;
  ExpectCorrupt(bad, "reserved");
  bad = b;
  PokeU64(&bad, 8, uint64_t{1} << 40);
  ExpectCorrupt(bad, "huge dense size");
  bad = b;
  PokeU64(&bad, 16, uint64_t{1} << 31);  // nnz far beyond the buffer: must not allocate it
  PokeU64(&bad, 24, uint64_t{1} << 31);
  ExpectCorrupt(bad, "oversized nnz");
  bad = b;
  PokeU64(&bad, 16, 38);
  ExpectCorrupt(bad, "nnz > dense size");
}

// Regression (codec_fuzz): a varint section whose length field leaves fewer
// bytes than the value section needs. The bound on the length was computed as
// left - value_bytes after the field was read, which wrapped, and the decoder
// then allocated index_count ids (here 2^28, 1 GiB) before failing.
TEST(Codec, VarintLengthFieldEatingTheValuesIsRejectedBeforeAllocating) {
  std::vector<uint8_t> b = Valid(IndexEncoding::kBlockVarint);  // fp16 values: 2 bytes each
  const uint64_t nnz = 21;
  std::vector<uint8_t> bad(b.begin(), b.begin() + 32);
  PokeU64(&bad, 8, uint64_t{1} << 32);   // dense size: 2^28 blocks
  PokeU64(&bad, 16, nnz);                // 42 value bytes
  PokeU64(&bad, 24, uint64_t{1} << 28);  // block ids claimed
  bad.resize(32 + 8 + 2 * nnz - 4, 0);   // length field + 38 bytes: 46 left before the field, 38 after
  PokeU64(&bad, 32, uint64_t{1} << 40);  // section length: far beyond the message
  SparseVector out;
  Status st = Decode(bad, DecodeLimits{}, &out);
  EXPECT_EQ(st.code(), Status::Code::kCorruption);
  EXPECT_NE(st.message().find("varint section truncated"), std::string::npos) << st.message();
  ExpectCorrupt(bad, "varint length over the values");
}

TEST(Codec, DecodeRejectsBadIndices) {
  // Absolute u32: index section starts after the 32-byte header.
  std::vector<uint8_t> b = Valid(IndexEncoding::kAbsoluteU32);
  auto bad = b;
  bad[32 + 4] = 0;  // second index 1 -> 0: not increasing
  ExpectCorrupt(bad, "not increasing");
  bad = b;
  bad[32 + 20 * 4] = 200;  // last index out of range
  ExpectCorrupt(bad, "out of range");
  // Block ids: ids 0, 2 -> make the second one 9 (out of range) or 0 (repeat).
  b = Valid(IndexEncoding::kBlockId);
  bad = b;
  bad[36] = 9;
  ExpectCorrupt(bad, "block out of range");
  bad = b;
  bad[36] = 0;
  ExpectCorrupt(bad, "block repeated");
  bad = b;
  bad[36] = 1;  // block 1 is a full block, so nnz no longer matches
  ExpectCorrupt(bad, "block nnz mismatch");
  // Varint: the section length at 32, varints from 40. First index 0, then gaps of 1.
  b = Valid(IndexEncoding::kDeltaVarint);
  bad = b;
  bad[41] = 0;
  ExpectCorrupt(bad, "zero gap");
  bad = b;
  bad[40] = 0x80;  // 0x80 0x01 = 128: valid varint form but shifts the section
  ExpectCorrupt(bad, "varint section mismatch");
  bad = b;
  PokeU64(&bad, 32, 1000);
  ExpectCorrupt(bad, "varint length beyond buffer");
  // Varint block ids: the section length at 32, then first id 0 and a gap of 2.
  b = Valid(IndexEncoding::kBlockVarint);
  ASSERT_EQ(b[40], 0);
  ASSERT_EQ(b[41], 2);
  bad = b;
  bad[41] = 0;
  ExpectCorrupt(bad, "zero block gap");
  bad = b;
  bad[41] = 9;
  ExpectCorrupt(bad, "varint block out of range");
  bad = b;
  bad[41] = 1;
  ExpectCorrupt(bad, "varint block nnz mismatch");
  bad = b;
  bad[40] = 0x80;  // a two-byte varint swallows the second id
  ExpectCorrupt(bad, "varint block section mismatch");
  bad = b;
  PokeU64(&bad, 24, 3);  // three block ids claimed, two present
  ExpectCorrupt(bad, "varint block count");
  bad = b;
  PokeU64(&bad, 32, 1000);
  ExpectCorrupt(bad, "varint block length beyond buffer");
}

// A vector with every index (a density-1 round) carries no index section:
// the header's flags say so, whatever the index encoding asked for.
TEST(Codec, EveryIndexPresentCostsNoIndexBytes) {
  SparseVector full;
  full.dense_size = 37;  // two whole blocks and a short tail
  for (uint32_t i = 0; i < 37; ++i) {
    full.indices.push_back(i);
    full.values.push_back(0.5f * static_cast<float>(i) - 3.0f);
  }
  for (auto ienc : {IndexEncoding::kAbsoluteU32, IndexEncoding::kDeltaVarint, IndexEncoding::kBlockId,
                    IndexEncoding::kBlockVarint}) {
    std::vector<uint8_t> bytes;
    ASSERT_TRUE(Encode(full, {ValueEncoding::kInt4, ienc}, &bytes).ok());
    EXPECT_EQ(bytes.size(), 32 + ValueSectionBytes(ValueEncoding::kInt4, 37));
    EXPECT_EQ(bytes.size(), EncodedSize(full, {ValueEncoding::kInt4, ienc}));
    EXPECT_EQ(bytes[7], 1);  // flags: every index
    SparseVector got;
    ASSERT_TRUE(Decode(bytes, DecodeLimits{}, &got).ok());
    EXPECT_EQ(got.dense_size, 37u);
    EXPECT_EQ(got.indices, full.indices);
    EXPECT_EQ(got.values.size(), 37u);
    // The flag on a vector that is not full, or with an index count, or
    // unknown flag bits: corrupt.
    auto bad = bytes;
    PokeU64(&bad, 8, 38);
    ExpectCorrupt(bad, "all indices, nnz below dense size");
    bad = bytes;
    PokeU64(&bad, 24, 3);
    ExpectCorrupt(bad, "all indices with an index count");
    bad = bytes;
    bad[7] = 2;
    ExpectCorrupt(bad, "unknown flag");
  }
  // The format stays canonical: every index written out (flag 0) is refused.
  std::vector<uint8_t> listed = {0x46, 0x52, 0x53, 0x56, 1, 0, 0, 0};  // "FRSV" v1 fp32 u32, flags 0
  for (uint64_t field : {1, 1, 1}) {                                  // dense size, nnz, index count
    for (int i = 0; i < 8; ++i) listed.push_back(static_cast<uint8_t>(field >> (8 * i)));
  }
  for (uint8_t b : {0, 0, 0, 0, 0, 0, 0x80, 0x3f}) listed.push_back(b);  // index 0, value 1.0f
  ExpectCorrupt(listed, "every index listed");
  listed[7] = 1;
  ExpectCorrupt(listed, "flag with an index section");
  std::vector<uint8_t> partial = Valid(IndexEncoding::kBlockVarint);
  EXPECT_EQ(partial[7], 0);  // a partial vector keeps its index section
  partial[7] = 1;
  ExpectCorrupt(partial, "all indices on a partial vector");
  EXPECT_EQ(IndexBytesPerValue(IndexEncoding::kBlockVarint, 1.0), 0.0);
  EXPECT_EQ(IndexBytesPerValue(IndexEncoding::kAbsoluteU32, 1.0), 0.0);
}

// Heavy-tailed values (a pseudo-gradient's), every index: int4 codes that
// zlib shrinks.
SparseVector HeavyTailed(uint64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::student_t_distribution<float> t3(3.0f);
  SparseVector v;
  v.dense_size = n;
  for (uint32_t i = 0; i < n; ++i) {
    v.indices.push_back(i);
    v.values.push_back(t3(rng));
  }
  return v;
}

// Note kDeflatedValues (codec.h): the deflated message is smaller, flagged,
// and decodes to exactly what the raw one decodes to; values that do not
// shrink (a few) or shrink beyond kMaxInflateRatio (zeros) go raw.
TEST(Codec, DeflatedValuesDecodeAsTheRawOnes) {
  const SparseVector v = HeavyTailed(20000, 5);
  for (auto ienc : {IndexEncoding::kBlockVarint, IndexEncoding::kAbsoluteU32}) {
    SparseVector sparse = v;  // and a sparse selection, with an index section
    if (ienc == IndexEncoding::kAbsoluteU32) {
      sparse = RandomSparse(60000, 20000, 9);
      sparse.values = v.values;
    }
    std::vector<uint8_t> raw, packed;
    ASSERT_TRUE(Encode(sparse, {ValueEncoding::kInt4, ienc, false}, &raw).ok());
    ASSERT_TRUE(Encode(sparse, {ValueEncoding::kInt4, ienc, true}, &packed).ok());
    EXPECT_EQ(raw[7] & 2, 0);
    EXPECT_EQ(packed[7] & 2, 2);
    EXPECT_GT(raw.size() - packed.size(), ValueSectionBytes(ValueEncoding::kInt4, sparse.nnz()) / 10)
        << "t(3) int4 codes shrink by more than 10%";
    EXPECT_LE(packed.size(), EncodedSize(sparse, {ValueEncoding::kInt4, ienc, true}));
    SparseVector a, b;
    ASSERT_TRUE(Decode(raw, DecodeLimits{}, &a).ok());
    Status st = Decode(packed, DecodeLimits{}, &b);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(b.indices, a.indices);
    EXPECT_EQ(b.values, a.values);
    std::vector<uint8_t> again;
    ASSERT_TRUE(Encode(b, {ValueEncoding::kInt4, ienc, true}, &again).ok());
    EXPECT_EQ(again, packed);  // our own encoder is deterministic
  }
  SparseVector few = RandomSparse(50, 3, 4);  // 12 bytes: zlib's own framing is longer
  SparseVector zeros = v;
  std::fill(zeros.values.begin(), zeros.values.end(), 0.0f);  // int4 zeros shrink far beyond 16x
  for (const auto& [vec, venc] : {std::pair{few, ValueEncoding::kFp32}, std::pair{zeros, ValueEncoding::kInt4}}) {
    std::vector<uint8_t> raw, packed;
    ASSERT_TRUE(Encode(vec, {venc, IndexEncoding::kDeltaVarint, false}, &raw).ok());
    ASSERT_TRUE(Encode(vec, {venc, IndexEncoding::kDeltaVarint, true}, &packed).ok());
    EXPECT_EQ(packed, raw);
  }
}

// A deflated section whose length field, stream or ratio is wrong is
// corrupt; so is every truncation.
TEST(Codec, DecodeRejectsBadDeflatedValues) {
  std::vector<uint8_t> good;
  ASSERT_TRUE(Encode(HeavyTailed(4000, 6), {ValueEncoding::kInt4, IndexEncoding::kBlockVarint, true}, &good).ok());
  ASSERT_EQ(good[7], 3);  // every index, deflated
  const size_t at = 32;   // no index section: the length field follows the header
  for (size_t len = 0; len < good.size(); len += 7) {
    ExpectCorrupt(std::vector<uint8_t>(good.begin(), good.begin() + len), "truncated to " + std::to_string(len));
  }
  auto bad = good;
  bad.push_back(0);
  ExpectCorrupt(bad, "trailing byte");
  bad = good;
  PokeU64(&bad, at, good.size() - at - 9);
  ExpectCorrupt(bad, "length field short of the stream");
  bad = good;
  bad[at + 8 + 40] ^= 0x5a;
  ExpectCorrupt(bad, "damaged stream");
  bad = good;
  bad[7] = 1;  // the deflated bytes read as raw codes
  ExpectCorrupt(bad, "flag cleared");
  // A stream that inflates beyond kMaxInflateRatio is refused before it is
  // inflated: 64 KiB of int4 zeros claimed by a message of a few hundred bytes.
  std::vector<uint8_t> zeros(ValueSectionBytes(ValueEncoding::kInt4, 1u << 17), 0);
  uLongf size = compressBound(static_cast<uLong>(zeros.size()));
  std::vector<uint8_t> stream(size);
  ASSERT_EQ(compress2(stream.data(), &size, zeros.data(), static_cast<uLong>(zeros.size()), 1), Z_OK);
  stream.resize(size);
  std::vector<uint8_t> bomb(good.begin(), good.begin() + at);
  PokeU64(&bomb, 8, 1u << 17);
  PokeU64(&bomb, 16, 1u << 17);
  bomb.resize(at + 8);
  PokeU64(&bomb, at, stream.size());
  bomb.insert(bomb.end(), stream.begin(), stream.end());
  ExpectCorrupt(bomb, "inflates beyond the ratio");
}

TEST(Codec, DecodeRejectsNonFiniteValues) {
  std::vector<uint8_t> b = Valid(IndexEncoding::kAbsoluteU32);
  b[b.size() - 1] = 0x7c;  // last fp16 value -> Inf
  b[b.size() - 2] = 0x00;
  ExpectCorrupt(b, "inf value");
}

TEST(Codec, DecodeRespectsLimits) {
  std::vector<uint8_t> b = Valid(IndexEncoding::kAbsoluteU32);
  SparseVector out;
  DecodeLimits limits;
  limits.max_nnz = 5;
  EXPECT_EQ(Decode(b, limits, &out).code(), Status::Code::kCorruption);
  limits = DecodeLimits{};
  limits.max_dense_size = 36;
  EXPECT_EQ(Decode(b, limits, &out).code(), Status::Code::kCorruption);
}

TEST(Codec, RandomCorruptionNeverCrashes) {
  std::mt19937 rng(7);
  for (auto ienc : {IndexEncoding::kAbsoluteU32, IndexEncoding::kDeltaVarint, IndexEncoding::kBlockId,
                    IndexEncoding::kBlockVarint}) {
    std::vector<uint8_t> b = Valid(ienc);
    for (int trial = 0; trial < 2000; ++trial) {
      auto bad = b;
      int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) bad[rng() % bad.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
      SparseVector out;
      Status st = Decode(bad, DecodeLimits{}, &out);
      if (st.ok()) {
        EXPECT_TRUE(ValidateSparseVector(out).ok());
      }
    }
  }
}

TEST(Codec, ParsesEncodingNames) {
  EXPECT_EQ(ParseValueEncoding("bf16").value(), ValueEncoding::kBf16);
  EXPECT_EQ(ParseIndexEncoding("varint").value(), IndexEncoding::kDeltaVarint);
  EXPECT_FALSE(ParseValueEncoding("fp8").ok());
  EXPECT_FALSE(ParseIndexEncoding("csr").ok());
}

}  // namespace
}  // namespace frugal::compress
