#include "frugal/compress/codec.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include <zlib.h>

namespace frugal::compress {
namespace {

constexpr uint32_t kMagic = 0x56535246;  // "FRSV" little-endian.
constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderSize = 4 + 4 + 8 + 8 + 8;
// Header flags (codec.h).
constexpr uint8_t kAllIndices = 1;
constexpr uint8_t kDeflatedValues = 2;

// Every index present: no index section (kAllIndices).
bool HasAllIndices(const SparseVector& v) { return v.nnz() > 0 && v.nnz() == v.dense_size; }

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

void PutU32(std::vector<uint8_t>* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void PutU64(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
size_t VarintSize(uint32_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}
void PutVarint(std::vector<uint8_t>* out, uint32_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<uint8_t>(v));
}

// Bounds-checked little-endian reader: every Read* fails instead of running
// past the end, so Decode cannot read out of bounds whatever the input.
class Reader {
 public:
  explicit Reader(Span<const uint8_t> bytes) : p_(bytes.data()), left_(bytes.size()) {}
  size_t left() const { return left_; }
  size_t offset(Span<const uint8_t> all) const { return static_cast<size_t>(p_ - all.data()); }
  bool ReadU8(uint8_t* v) {
    if (left_ < 1) return false;
    *v = *p_++;
    --left_;
    return true;
  }
  bool ReadU32(uint32_t* v) {
    if (left_ < 4) return false;
    *v = uint32_t{p_[0]} | (uint32_t{p_[1]} << 8) | (uint32_t{p_[2]} << 16) | (uint32_t{p_[3]} << 24);
    p_ += 4;
    left_ -= 4;
    return true;
  }
  bool ReadU64(uint64_t* v) {
    uint32_t lo, hi;
    if (left_ < 8) return false;
    ReadU32(&lo);
    ReadU32(&hi);
    *v = (uint64_t{hi} << 32) | lo;
    return true;
  }
  // Canonical LEB128 u32: at most 5 bytes, no overlong forms.
  Status ReadVarint(uint32_t* v) {
    uint64_t result = 0;
    for (int i = 0; i < 5; ++i) {
      uint8_t b;
      if (!ReadU8(&b)) return Status::Corruption("varint truncated");
      result |= uint64_t{b & 0x7fu} << (7 * i);
      if ((b & 0x80) == 0) {
        if (b == 0 && i > 0) return Status::Corruption("overlong varint");
        if (result > std::numeric_limits<uint32_t>::max()) return Status::Corruption("varint exceeds 32 bits");
        *v = static_cast<uint32_t>(result);
        return Status::Ok();
      }
    }
    return Status::Corruption("varint longer than 5 bytes");
  }

 private:
  const uint8_t* p_;
  size_t left_;
};

// u64 byte length, then LEB128 of indices[0] / unit and of the gaps between
// indices[j] and indices[j - step] (divided by unit = step): every index for
// kDeltaVarint (step 1), every block's first index for kBlockVarint.
void PutVarintSection(const SparseVector& v, size_t step, std::vector<uint8_t>* out) {
  const uint32_t unit = static_cast<uint32_t>(step);
  size_t length_at = out->size();
  PutU64(out, 0);
  size_t start = out->size();
  uint32_t prev = 0;
  for (size_t j = 0; j < v.nnz(); j += step) {
    PutVarint(out, j == 0 ? v.indices[j] / unit : (v.indices[j] - prev) / unit);
    prev = v.indices[j];
  }
  uint64_t length = out->size() - start;
  for (int i = 0; i < 8; ++i) (*out)[length_at + i] = static_cast<uint8_t>(length >> (8 * i));
}

// The index section of v in encoding e (absent under kAllIndices).
void PutIndexSection(const SparseVector& v, IndexEncoding e, std::vector<uint8_t>* out) {
  switch (e) {
    case IndexEncoding::kAbsoluteU32:
      for (uint32_t i : v.indices) PutU32(out, i);
      break;
    case IndexEncoding::kBlockId:
      for (size_t j = 0; j < v.nnz(); j += kBlockSize) PutU32(out, v.indices[j] / kBlockSize);
      break;
    case IndexEncoding::kDeltaVarint:
      PutVarintSection(v, 1, out);
      break;
    case IndexEncoding::kBlockVarint:
      PutVarintSection(v, kBlockSize, out);
      break;
  }
}

// *packed: `raw` deflated (zlib, level 1), when that is worth sending
// (kDeflatedValues: smaller with its length field, within kMaxInflateRatio).
bool DeflateWorthIt(const std::vector<uint8_t>& raw, std::vector<uint8_t>* packed) {
  if (raw.empty()) return false;
  uLongf size = compressBound(static_cast<uLong>(raw.size()));
  packed->resize(size);
  if (compress2(packed->data(), &size, raw.data(), static_cast<uLong>(raw.size()), 1) != Z_OK) return false;
  packed->resize(size);
  return size + 8 < raw.size() && raw.size() <= kMaxInflateRatio * size;
}

// Inflates the deflated value section (u64 length | stream, all of `r`'s
// remaining bytes) into exactly value_bytes bytes.
Status Inflate(Reader* r, Span<const uint8_t> all, uint64_t value_bytes, std::vector<uint8_t>* out) {
  uint64_t length;
  if (!r->ReadU64(&length)) return Status::Corruption("deflated value section truncated");
  if (length != r->left()) {
    return Status::Corruption("deflated value section of " + std::to_string(length) + " bytes, " +
                              std::to_string(r->left()) + " present");
  }
  if (length + 8 >= value_bytes || value_bytes > kMaxInflateRatio * length) {
    return Status::Corruption("deflated value section of " + std::to_string(length) + " bytes for " +
                              std::to_string(value_bytes) + " (not what an encoder sends)");
  }
  out->resize(value_bytes);
  uLongf out_size = static_cast<uLongf>(value_bytes);
  uLong in_size = static_cast<uLong>(length);
  const int rc = uncompress2(out->data(), &out_size, all.data() + r->offset(all), &in_size);
  if (rc != Z_OK || out_size != value_bytes || in_size != length) {
    return Status::Corruption("deflated value section does not inflate to " + std::to_string(value_bytes) +
                              " bytes (zlib " + std::to_string(rc) + ")");
  }
  return Status::Ok();
}

Status CheckBlocks(const SparseVector& v) {
  size_t j = 0;
  while (j < v.indices.size()) {
    uint64_t start = v.indices[j];
    if (start % kBlockSize != 0) {
      return Status::InvalidArgument("block encoding: index " + std::to_string(start) +
                                     " does not start a 16-element block");
    }
    uint64_t len = std::min<uint64_t>(kBlockSize, v.dense_size - start);
    if (j + len > v.indices.size() || v.indices[j + len - 1] != start + len - 1) {
      // Indices are strictly increasing, so first and last of the run decide it.
      return Status::InvalidArgument("block encoding: block starting at " + std::to_string(start) +
                                     " is not complete");
    }
    j += len;
  }
  return Status::Ok();
}

}  // namespace

uint16_t FloatToHalf(float f) {
  uint32_t x = FloatBits(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  x &= 0x7fffffff;
  if (x > 0x7f800000) return sign | 0x7e00;          // NaN
  if (x > 0x477fe000) return sign | 0x7bff;          // saturate beyond 65504 (and Inf)
  if (x < 0x38800000) {                              // below 2^-14: half subnormal or zero
    if (x < 0x33000000) return sign;                 // below 2^-25 rounds to zero
    uint32_t e = x >> 23;
    uint32_t m = (x & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e;                        // 14..24
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t h = ((x >> 13) - (112u << 10));
  uint32_t rem = x & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float HalfToFloat(uint16_t h) {
  uint32_t sign = uint32_t{h & 0x8000u} << 16;
  uint32_t e = (h >> 10) & 0x1f;
  uint32_t m = h & 0x3ff;
  if (e == 0) {
    // Subnormal: m * 2^-24, exact in fp32.
    float f = static_cast<float>(m) * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  if (e == 31) return BitsFloat(sign | 0x7f800000 | (m << 13));
  return BitsFloat(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t FloatToBf16(float f) {
  uint32_t x = FloatBits(f);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  uint32_t rounded = x + 0x7fff + ((x >> 16) & 1);
  uint16_t h = static_cast<uint16_t>(rounded >> 16);
  if ((h & 0x7f80) == 0x7f80 && (x & 0x7f800000) != 0x7f800000) {
    h = static_cast<uint16_t>((x >> 16 & 0x8000) | 0x7f7f);  // saturate instead of overflowing to Inf
  }
  return h;
}

float Bf16ToFloat(uint16_t h) { return BitsFloat(uint32_t{h} << 16); }

Result<ValueEncoding> ParseValueEncoding(const std::string& name) {
  if (name == "fp32") return ValueEncoding::kFp32;
  if (name == "fp16") return ValueEncoding::kFp16;
  if (name == "bf16") return ValueEncoding::kBf16;
  if (name == "int8") return ValueEncoding::kInt8;
  if (name == "int4") return ValueEncoding::kInt4;
  return Status::InvalidArgument("unknown value encoding '" + name + "' (expected fp32, fp16, bf16, int8 or int4)");
}

WireFormat MergedWireFormat(WireFormat wire) {
  if (IsIntegerCoded(wire.values)) wire.values = ValueEncoding::kInt8;
  return wire;
}

Result<IndexEncoding> ParseIndexEncoding(const std::string& name) {
  if (name == "u32") return IndexEncoding::kAbsoluteU32;
  if (name == "varint") return IndexEncoding::kDeltaVarint;
  if (name == "block") return IndexEncoding::kBlockId;
  if (name == "block_varint") return IndexEncoding::kBlockVarint;
  return Status::InvalidArgument("unknown index encoding '" + name + "' (expected u32, varint, block or block_varint)");
}

double IndexBytesPerValue(IndexEncoding e, double density) {
  if (density >= 1) return 0.0;
  switch (e) {
    case IndexEncoding::kAbsoluteU32:
      return 4.0;
    case IndexEncoding::kDeltaVarint:
      return 2.0;
    case IndexEncoding::kBlockId:
      return 4.0 / kBlockSize;
    case IndexEncoding::kBlockVarint: {
      const double gap = density > 0 ? std::min(1.0 / density, 4294967295.0) : 4294967295.0;
      return static_cast<double>(VarintSize(static_cast<uint32_t>(std::ceil(gap)))) / kBlockSize;
    }
  }
  return 4.0;
}

double DefaultChunkBytesPerValue(double density) {
  return BytesPerValue(ValueEncoding::kInt4) + IndexBytesPerValue(IndexEncoding::kBlockVarint, density);
}

double DefaultMergedBytesPerValue(double density) {
  return BytesPerValue(ValueEncoding::kInt8) + IndexBytesPerValue(IndexEncoding::kBlockVarint, density);
}

size_t EncodedSize(const SparseVector& v, WireFormat format) {
  size_t size = kHeaderSize + ValueSectionBytes(format.values, v.nnz());
  if (HasAllIndices(v)) return size;
  switch (format.indices) {
    case IndexEncoding::kAbsoluteU32:
      return size + 4 * v.nnz();
    case IndexEncoding::kBlockId:
      return size + 4 * ((v.nnz() + kBlockSize - 1) / kBlockSize);
    case IndexEncoding::kDeltaVarint:
    case IndexEncoding::kBlockVarint: {
      const size_t step = format.indices == IndexEncoding::kBlockVarint ? kBlockSize : 1;
      const uint32_t unit = static_cast<uint32_t>(step);
      size += 8;
      uint32_t prev = 0;
      for (size_t j = 0; j < v.nnz(); j += step) {
        size += VarintSize(j == 0 ? v.indices[j] / unit : (v.indices[j] - prev) / unit);
        prev = v.indices[j];
      }
      return size;
    }
  }
  return size;
}

Status Encode(const SparseVector& v, WireFormat format, std::vector<uint8_t>* out) {
  if (v.dense_size > (uint64_t{1} << 32)) {
    return Status::InvalidArgument("dense size " + std::to_string(v.dense_size) +
                                   " exceeds the 2^32 limit of u32 indices");
  }
  FRUGAL_RETURN_IF_ERROR(ValidateSparseVector(v));
  // An all-ones exponent is NaN or Inf: a branch-free test that vectorises;
  // the loop after it names the first such value.
  uint32_t nonfinite = 0;
  for (size_t j = 0; j < v.nnz(); ++j) {
    nonfinite |= static_cast<uint32_t>((FloatBits(v.values[j]) & 0x7f800000u) == 0x7f800000u);
  }
  for (size_t j = 0; nonfinite != 0 && j < v.nnz(); ++j) {
    if (!std::isfinite(v.values[j])) {
      return Status::InvalidArgument("value at index " + std::to_string(v.indices[j]) + " is not finite");
    }
  }
  const bool all = HasAllIndices(v);
  uint64_t index_count = all ? 0 : v.nnz();
  if (IsBlockIndexed(format.indices) && !all) {
    FRUGAL_RETURN_IF_ERROR(CheckBlocks(v));
    index_count = (v.nnz() + kBlockSize - 1) / kBlockSize;
  }
  // Deflate needs the raw section first; without it the values go straight
  // into *out, as they always did.
  const Span<const float> vals(v.values.data(), v.values.size());
  std::vector<uint8_t> values, packed;
  if (format.deflate) PutValues(format.values, vals, &values);
  const bool deflated = format.deflate && DeflateWorthIt(values, &packed);
  out->reserve(out->size() + EncodedSize(v, format));
  PutU32(out, kMagic);
  out->push_back(kVersion);
  out->push_back(static_cast<uint8_t>(format.values));
  out->push_back(static_cast<uint8_t>(format.indices));
  out->push_back(static_cast<uint8_t>((all ? kAllIndices : 0) | (deflated ? kDeflatedValues : 0)));
  PutU64(out, v.dense_size);
  PutU64(out, v.nnz());
  PutU64(out, index_count);
  if (!all) PutIndexSection(v, format.indices, out);
  if (deflated) {
    PutU64(out, packed.size());
    out->insert(out->end(), packed.begin(), packed.end());
  } else if (format.deflate) {
    out->insert(out->end(), values.begin(), values.end());
  } else {
    PutValues(format.values, vals, out);
  }
  return Status::Ok();
}

namespace {

struct WireHeader {
  ValueEncoding values;
  IndexEncoding indices;
  uint64_t dense_size;
  uint64_t nnz;
  uint64_t index_count;
  bool all;       // kAllIndices: no index section
  bool deflated;  // kDeflatedValues: u64 length | zlib stream
};

// Reads the fixed header and checks every field against the format and `limits`.
Status ReadHeader(Reader* r, size_t total_bytes, const DecodeLimits& limits, WireHeader* h) {
  uint32_t magic;
  uint8_t version, value_enc, index_enc, flags;
  uint64_t dense_size, nnz, index_count;
  if (!r->ReadU32(&magic) || !r->ReadU8(&version) || !r->ReadU8(&value_enc) || !r->ReadU8(&index_enc) ||
      !r->ReadU8(&flags) || !r->ReadU64(&dense_size) || !r->ReadU64(&nnz) || !r->ReadU64(&index_count)) {
    return Status::Corruption("header truncated: " + std::to_string(total_bytes) + " bytes, need " +
                              std::to_string(kHeaderSize));
  }
  if (magic != kMagic) return Status::Corruption("bad magic (not a Frugal sparse vector)");
  if (version != kVersion) return Status::Corruption("unsupported version " + std::to_string(version));
  if (value_enc > kMaxValueEncoding) return Status::Corruption("unknown value encoding " + std::to_string(value_enc));
  if (index_enc > 3) return Status::Corruption("unknown index encoding " + std::to_string(index_enc));
  if ((flags & ~(kAllIndices | kDeflatedValues)) != 0) {
    return Status::Corruption("unknown header flags " + std::to_string(flags));
  }
  if (dense_size > limits.max_dense_size || dense_size > (uint64_t{1} << 32)) {
    return Status::Corruption("dense size " + std::to_string(dense_size) + " exceeds limit " +
                              std::to_string(limits.max_dense_size));
  }
  if (nnz > dense_size) {
    return Status::Corruption("nnz " + std::to_string(nnz) + " exceeds dense size " + std::to_string(dense_size));
  }
  if (nnz > limits.max_nnz) {
    return Status::Corruption("nnz " + std::to_string(nnz) + " exceeds limit " + std::to_string(limits.max_nnz));
  }
  const bool full = nnz > 0 && nnz == dense_size;
  if ((flags & kAllIndices) != 0 && (!full || index_count != 0)) {
    return Status::Corruption("all-indices flag with nnz " + std::to_string(nnz) + ", dense size " +
                              std::to_string(dense_size) + " and index count " + std::to_string(index_count));
  }
  if ((flags & kAllIndices) == 0 && full) {  // the format is canonical: Encode sets the flag here
    return Status::Corruption("every index present without the all-indices flag");
  }
  h->values = static_cast<ValueEncoding>(value_enc);
  h->indices = static_cast<IndexEncoding>(index_enc);
  h->dense_size = dense_size;
  h->nnz = nnz;
  h->index_count = index_count;
  h->all = (flags & kAllIndices) != 0;
  h->deflated = (flags & kDeflatedValues) != 0;
  return Status::Ok();
}

// REQUIRES: value_bytes <= r->left() (the value section follows the indices).
Status DecodeAbsoluteIndices(Reader* r, const WireHeader& h, uint64_t value_bytes, SparseVector* out) {
  const uint64_t nnz = h.nnz;
  if (h.index_count != nnz) return Status::Corruption("u32 index count differs from nnz");
  if (nnz * 4 > r->left() - value_bytes) return Status::Corruption("index section truncated");
  out->indices.resize(nnz);
  for (uint64_t j = 0; j < nnz; ++j) {
    uint32_t i = 0;
    r->ReadU32(&i);
    if (i >= h.dense_size) return Status::Corruption("index " + std::to_string(i) + " out of range");
    if (j > 0 && i <= out->indices[j - 1]) {
      return Status::Corruption("indices not strictly increasing at position " + std::to_string(j));
    }
    out->indices[j] = i;
  }
  return Status::Ok();
}

// The varint section of kDeltaVarint (count indices below `limit`) and
// kBlockVarint (count block ids below `limit`): u64 byte length, first value,
// then gaps >= 1; the section must be exactly `length` bytes.
// REQUIRES: value_bytes <= r->left().
Status ReadVarintSection(Reader* r, uint64_t count, uint64_t limit, uint64_t value_bytes, const char* what,
                         std::vector<uint32_t>* out) {
  uint64_t length;
  if (!r->ReadU64(&length)) return Status::Corruption("varint section length truncated");
  // The length field itself may have eaten into the value section: check
  // before subtracting (a wrapped difference let a 150-byte message allocate
  // 1 GiB of indices; found by codec_fuzz).
  if (value_bytes > r->left() || length > r->left() - value_bytes) {
    return Status::Corruption("varint section truncated");
  }
  if (count > length) return Status::Corruption("varint section too short for its " + std::string(what) + "s");
  size_t before = r->left();
  out->resize(count);
  uint64_t prev = 0;
  for (uint64_t j = 0; j < count; ++j) {
    uint32_t d;
    FRUGAL_RETURN_IF_ERROR(r->ReadVarint(&d));
    if (before - r->left() > length) return Status::Corruption("varint runs past its section");
    if (j > 0 && d == 0) return Status::Corruption("zero " + std::string(what) + " gap at position " + std::to_string(j));
    uint64_t i = (j == 0) ? d : prev + d;
    if (i >= limit) return Status::Corruption(std::string(what) + " " + std::to_string(i) + " out of range");
    (*out)[j] = static_cast<uint32_t>(i);
    prev = i;
  }
  if (before - r->left() != length) return Status::Corruption("varint section has trailing bytes");
  return Status::Ok();
}

// REQUIRES: value_bytes <= r->left().
Status DecodeVarintIndices(Reader* r, const WireHeader& h, uint64_t value_bytes, SparseVector* out) {
  if (h.index_count != h.nnz) return Status::Corruption("varint index count differs from nnz");
  return ReadVarintSection(r, h.nnz, h.dense_size, value_bytes, "index", &out->indices);
}

// Block ids, u32 (kBlockId) or varint (kBlockVarint), expanded to indices.
// REQUIRES: value_bytes <= r->left().
Status DecodeBlockIndices(Reader* r, const WireHeader& h, uint64_t value_bytes, SparseVector* out) {
  const uint64_t dense_size = h.dense_size;
  const uint64_t index_count = h.index_count;
  const uint64_t num_blocks = (dense_size + kBlockSize - 1) / kBlockSize;
  if (index_count > num_blocks) return Status::Corruption("more block ids than blocks");
  std::vector<uint32_t> ids;
  if (h.indices == IndexEncoding::kBlockVarint) {
    FRUGAL_RETURN_IF_ERROR(ReadVarintSection(r, index_count, num_blocks, value_bytes, "block id", &ids));
  } else {
    if (index_count * 4 > r->left() - value_bytes) return Status::Corruption("block id section truncated");
    ids.resize(index_count);
    for (uint64_t b = 0; b < index_count; ++b) {
      r->ReadU32(&ids[b]);
      if (ids[b] >= num_blocks) return Status::Corruption("block id " + std::to_string(ids[b]) + " out of range");
      if (b > 0 && ids[b] <= ids[b - 1]) return Status::Corruption("block ids not strictly increasing");
    }
  }
  // Count elements first so indices is allocated once and only when nnz agrees.
  uint64_t elements = index_count * kBlockSize;
  const uint64_t tail = dense_size % kBlockSize;
  if (index_count > 0 && tail != 0 && ids.back() == num_blocks - 1) elements -= kBlockSize - tail;
  if (elements != h.nnz) {
    return Status::Corruption("blocks cover " + std::to_string(elements) + " elements but nnz is " +
                              std::to_string(h.nnz));
  }
  out->indices.resize(h.nnz);
  size_t j = 0;
  for (uint32_t id : ids) {
    uint64_t start = uint64_t{id} * kBlockSize;
    uint64_t end = std::min<uint64_t>(start + kBlockSize, dense_size);
    for (uint64_t i = start; i < end; ++i) out->indices[j++] = static_cast<uint32_t>(i);
  }
  return Status::Ok();
}

Status DecodeIndices(Reader* r, const WireHeader& h, uint64_t value_bytes, SparseVector* out) {
  if (h.all) {
    out->indices.resize(h.nnz);
    std::iota(out->indices.begin(), out->indices.end(), uint32_t{0});
    return Status::Ok();
  }
  switch (h.indices) {
    case IndexEncoding::kAbsoluteU32:
      return DecodeAbsoluteIndices(r, h, value_bytes, out);
    case IndexEncoding::kDeltaVarint:
      return DecodeVarintIndices(r, h, value_bytes, out);
    case IndexEncoding::kBlockId:
    case IndexEncoding::kBlockVarint:
      return DecodeBlockIndices(r, h, value_bytes, out);
  }
  return Status::Ok();
}

Status DecodeImpl(Span<const uint8_t> bytes, const DecodeLimits& limits, SparseVector* out) {
  Reader r(bytes);
  WireHeader h;
  FRUGAL_RETURN_IF_ERROR(ReadHeader(&r, bytes.size(), limits, &h));
  const uint64_t value_bytes = ValueSectionBytes(h.values, h.nnz);  // nnz <= 2^32: no overflow.
  // The bytes the value section takes at the end: value_bytes, or deflated
  // a length field and at least one byte, inflating to at most
  // kMaxInflateRatio times the bytes present (before anything is allocated).
  const uint64_t tail = h.deflated ? 9 : value_bytes;
  if (tail > r.left() || (h.deflated && value_bytes > kMaxInflateRatio * r.left())) {
    return Status::Corruption("value section truncated");
  }

  out->dense_size = h.dense_size;
  FRUGAL_RETURN_IF_ERROR(DecodeIndices(&r, h, tail, out));
  std::vector<uint8_t> inflated;
  Span<const uint8_t> section;
  if (h.deflated) {
    FRUGAL_RETURN_IF_ERROR(Inflate(&r, bytes, value_bytes, &inflated));
    section = Span<const uint8_t>(inflated.data(), inflated.size());
  } else {
    if (r.left() != value_bytes) {
      return Status::Corruption(std::to_string(r.left() - std::min<uint64_t>(r.left(), value_bytes)) +
                                " trailing bytes after the value section");
    }
    section = bytes.subspan(bytes.size() - value_bytes, value_bytes);
  }
  out->values.resize(h.nnz);
  return ReadValues(h.values, section, Span<float>(out->values.data(), out->values.size()));
}

}  // namespace

Status Decode(Span<const uint8_t> bytes, const DecodeLimits& limits, SparseVector* out) {
  Status st = DecodeImpl(bytes, limits, out);
  if (!st.ok()) {
    out->Clear(0);
    return st.WithContext("decoding sparse vector");
  }
  return st;
}

}  // namespace frugal::compress
