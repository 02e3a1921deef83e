// Wire codec for SparseVector: how a sparse gradient crosses the network.
//
// Layout (all integers little-endian):
//   u32 magic "FRSV" | u8 version (1) | u8 ValueEncoding | u8 IndexEncoding |
//   u8 flags | u64 dense_size | u64 nnz | u64 index_count |
//   index section | value section (nnz values)
// index_count is nnz for kAbsoluteU32 / kDeltaVarint and the number of
// blocks for kBlockId / kBlockVarint.
// flags: bit 0 (kAllIndices) says every index 0..dense_size-1 is present:
// the index section is omitted and index_count is 0, whatever the
// IndexEncoding. Encode sets it for any non-empty vector with nnz ==
// dense_size (a density-1 round: its indices would cost 1/16 to 4 bytes per
// value and say nothing). Bit 1 (kDeflatedValues): the value section is
// u64 length | a zlib stream of that many bytes, which inflates to exactly
// the value section's bytes; Encode writes it when WireFormat::deflate asks
// for it and it saves bytes, at most kMaxInflateRatio raw bytes per deflated
// byte (which bounds what a message can make the decoder allocate). The
// other bits are 0. (The byte was reserved, 0, before: older messages decode
// as they did.)
//   kAbsoluteU32: index_count x u32.
//   kDeltaVarint: u64 byte length, then index_count LEB128 u32 varints: the
//                 first index, then gaps (index[i] - index[i-1] >= 1).
//   kBlockId:     index_count x u32 block ids b; block b covers elements
//                 [16b, min(16b + 16, dense_size)) and all of them are present.
//   kBlockVarint: the blocks of kBlockId, their ids written as kDeltaVarint
//                 writes indices (u64 byte length, first id, gaps >= 1): about
//                 one byte per block at densities above 1/128 of the blocks,
//                 1/16 byte per value against kBlockId's 1/4.
// Values: fp32, fp16 (IEEE binary16) or bf16, round-to-nearest-even, or int8 /
// int4 codes with a power-of-two scale per group of 256 (value_codes.h).
//
// Decode validates everything it reads (magic, version, enums, sizes against
// DecodeLimits and against the buffer length before allocating, strictly
// increasing in-range indices, varint form, exact length, finite values) and
// returns Status::Corruption with what was wrong. It never reads or writes out
// of bounds on any input (fuzzed: src/compress/fuzz/codec_fuzz.cc).
//
// Thread safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frugal/common/span.h"
#include "frugal/common/enum_names.h"
#include "frugal/common/status.h"
#include "frugal/compress/sparse_vector.h"
#include "frugal/compress/value_codes.h"

namespace frugal::compress {

enum class IndexEncoding : uint8_t { kAbsoluteU32 = 0, kDeltaVarint = 1, kBlockId = 2, kBlockVarint = 3 };
inline bool IsBlockIndexed(IndexEncoding e) { return e == IndexEncoding::kBlockId || e == IndexEncoding::kBlockVarint; }

struct WireFormat {
  ValueEncoding values = ValueEncoding::kFp32;
  IndexEncoding indices = IndexEncoding::kDeltaVarint;
  // zlib (level 1) over the value section where that saves bytes: int4 codes
  // are far from uniform nibbles (docs/design/kernels.md, "Deflated values").
  bool deflate = false;
};

// Largest value section accepted per deflated byte (the flags above).
inline constexpr uint64_t kMaxInflateRatio = 16;

// The format of a combined (merged) update: the same as `wire`, except that
// int4 becomes int8. A sum of coded values is not coded, and a merge has no
// error feedback, so its rounding is lost: int8's (at most 1/127 of its
// group's largest value) is small, and a leader's message to the other
// clusters stays at 1.25 bytes per value instead of fp16's 2.25.
WireFormat MergedWireFormat(WireFormat wire);
// Parses "fp32" / "fp16" / "bf16" / "int8" / "int4" and "u32" / "varint" / "block" / "block_varint".
Result<ValueEncoding> ParseValueEncoding(const std::string& name);
Result<IndexEncoding> ParseIndexEncoding(const std::string& name);

struct DecodeLimits {
  // Largest dense_size accepted (indices are u32, so at most 2^32).
  uint64_t max_dense_size = uint64_t{1} << 32;
  // Largest nnz accepted; bounds the memory a hostile peer can make us use.
  uint64_t max_nnz = uint64_t{1} << 30;
};

// Appends the encoding of v to *out.
// Fails with InvalidArgument if v breaks the SparseVector invariants, if
// dense_size > 2^32, if a value is not finite, or (block ids) if the indices are
// not whole aligned blocks. fp16 values beyond +-65504 saturate to +-65504
// (a gradient coordinate is clipped rather than turned into Inf).
Status Encode(const SparseVector& v, WireFormat format, std::vector<uint8_t>* out);

// Index bytes per selected value, for planning: exact for u32 and block ids;
// for the varint encodings one varint per (block) gap of the mean gap at
// `density` (kDeltaVarint: 2 bytes, a conservative flat figure). 0 at
// density >= 1 (kAllIndices).
double IndexBytesPerValue(IndexEncoding e, double density);

// Wire bytes per sent value of Frugal's default wire at `density`, for
// planning: a worker's chunk as int4 codes, a merged update as int8 (with
// block-varint ids below density 1; compress::MergedWireFormat). The plan
// commands and frugal.plan price the exchange with it.
double DefaultChunkBytesPerValue(double density);
double DefaultMergedBytesPerValue(double density);

// Bytes Encode would produce for v (the varint encodings count their varints);
// with format.deflate an upper bound (the raw value section).
size_t EncodedSize(const SparseVector& v, WireFormat format);

// Decodes exactly `bytes` (no trailing data allowed) into *out, replacing its
// contents. On error *out is left empty with dense_size 0.
Status Decode(Span<const uint8_t> bytes, const DecodeLimits& limits, SparseVector* out);

// Conversions exposed for tests.
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
uint16_t FloatToBf16(float f);
float Bf16ToFloat(uint16_t h);

}  // namespace frugal::compress

template <>
struct frugal::EnumNames<frugal::compress::ValueEncoding> {
  static constexpr std::pair<compress::ValueEncoding, const char*> kTable[] = {
      {compress::ValueEncoding::kFp32, "fp32"}, {compress::ValueEncoding::kFp16, "fp16"}, {compress::ValueEncoding::kBf16, "bf16"},
      {compress::ValueEncoding::kInt8, "int8"}, {compress::ValueEncoding::kInt4, "int4"}};
};
