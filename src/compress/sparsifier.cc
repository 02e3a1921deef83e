#include "frugal/compress/sparsifier.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "sparsifier_impl.h"
#include "frugal/common/finite.h"

namespace frugal::compress {
namespace {

constexpr uint32_t kStateMagic = 0x53505346;  // "FSPS"
constexpr uint8_t kStateVersion = 1;

void PutU64(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

}  // namespace

std::vector<uint8_t> SparsifierState::Serialize() const {
  std::vector<uint8_t> out;
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(kStateMagic >> (8 * i)));
  out.push_back(kStateVersion);
  out.push_back(static_cast<uint8_t>(kind.size()));
  out.insert(out.end(), kind.begin(), kind.end());
  uint64_t bits;
  std::memcpy(&bits, &threshold, sizeof(bits));
  PutU64(&out, bits);
  PutU64(&out, rng_state);
  PutU64(&out, calls);
  return out;
}

Result<SparsifierState> SparsifierState::Deserialize(Span<const uint8_t> bytes) {
  if (bytes.size() < 6) return Status::Corruption("sparsifier state truncated");
  uint32_t magic = uint32_t{bytes[0]} | (uint32_t{bytes[1]} << 8) | (uint32_t{bytes[2]} << 16) |
                   (uint32_t{bytes[3]} << 24);
  if (magic != kStateMagic) return Status::Corruption("not a sparsifier state (bad magic)");
  if (bytes[4] != kStateVersion) return Status::Corruption("unsupported sparsifier state version");
  size_t kind_len = bytes[5];
  if (bytes.size() != 6 + kind_len + 24) return Status::Corruption("sparsifier state has wrong length");
  SparsifierState s;
  s.kind.assign(reinterpret_cast<const char*>(bytes.data() + 6), kind_len);
  const uint8_t* p = bytes.data() + 6 + kind_len;
  uint64_t bits = GetU64(p);
  std::memcpy(&s.threshold, &bits, sizeof(bits));
  if (!std::isfinite(s.threshold) || s.threshold < 0) return Status::Corruption("sparsifier threshold invalid");
  s.rng_state = GetU64(p + 8);
  s.calls = GetU64(p + 16);
  return s;
}

size_t TargetCount(size_t n, double density) {
  if (n == 0 || !(density > 0)) return 0;
  double k = std::round(density * static_cast<double>(n));
  if (k < 1) return 1;
  if (k >= static_cast<double>(n)) return n;
  return static_cast<size_t>(k);
}

Status CheckFinite(Span<const float> values, const std::string& tensor_name, const char* what) {
  if (AllFinite(values)) return Status::Ok();
  const size_t i = FirstNonFinite(values);
  return Status::InvalidArgument("tensor '" + tensor_name + "': " + what + " has " +
                                 (std::isnan(values[i]) ? "NaN" : "Inf") + " at index " + std::to_string(i) +
                                 " (diverged training or a bad loss scale?)");
}

SimdLevel DetectSimdLevel() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return SimdLevel::kAvx512;
  if (__builtin_cpu_supports("avx2")) return SimdLevel::kAvx2;
#endif
  return SimdLevel::kScalar;
}

const char* SimdLevelName(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAuto: return "auto";
    case SimdLevel::kScalar: return "scalar";
    case SimdLevel::kAvx2: return "avx2";
    case SimdLevel::kAvx512: return "avx512";
  }
  return "?";
}

Result<std::unique_ptr<Sparsifier>> CreateSparsifier(const std::string& kind, const SparsifierOptions& options) {
  if (kind == "topk") return internal::MakeTopkSparsifier(options);
  if (kind == "block") return internal::MakeBlockSparsifier(options);
  if (kind == "randomk") return internal::MakeRandomkSparsifier(options);
  if (kind == "sampled_topk") return internal::MakeSampledTopkSparsifier(options);
  return Status::InvalidArgument("unknown sparsifier '" + kind + "' (expected " + EnumChoices<SparsifierKind>() + ")");
}

namespace internal {

Status CheckSparsifyArgs(size_t n, double density, const std::string& tensor_name) {
  if (!(density >= 0.0 && density <= 1.0)) {
    return Status::InvalidArgument("tensor '" + tensor_name + "': density " + std::to_string(density) +
                                   " is outside [0, 1]");
  }
  if (n > (size_t{1} << 32)) {
    return Status::InvalidArgument("tensor '" + tensor_name + "': " + std::to_string(n) +
                                   " elements exceed the 2^32 limit of u32 indices");
  }
  return Status::Ok();
}

SimdLevel SupportedOrAuto(SimdLevel level) {
  const SimdLevel best = DetectSimdLevel();
  const bool supported = level == SimdLevel::kScalar || level == best ||
                         (level == SimdLevel::kAvx2 && best == SimdLevel::kAvx512);
  return supported ? level : SimdLevel::kAuto;
}

void SelectLargest(const float* keys, Span<const uint32_t> ids, size_t count, std::vector<float>* scratch,
                   std::vector<uint32_t>* out) {
  out->clear();
  if (count == 0) return;
  if (count >= ids.size()) {
    out->assign(ids.begin(), ids.end());
    return;
  }
  scratch->resize(ids.size());
  for (size_t j = 0; j < ids.size(); ++j) (*scratch)[j] = keys[ids[j]];
  // The count-th largest key; everything above it is in, ties fill the rest by id.
  std::nth_element(scratch->begin(), scratch->begin() + (count - 1), scratch->end(), std::greater<float>());
  const float kth = (*scratch)[count - 1];
  size_t above = 0;
  for (uint32_t id : ids) above += keys[id] > kth;
  size_t ties_left = count - above;
  out->reserve(count);
  for (uint32_t id : ids) {
    float k = keys[id];
    if (k > kth || (k == kth && ties_left > 0)) {
      if (k == kth) --ties_left;
      out->push_back(id);
    }
  }
}

}  // namespace internal
}  // namespace frugal::compress
