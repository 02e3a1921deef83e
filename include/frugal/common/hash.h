// FNV-1a, 64-bit: the one fingerprint of the code base (replica checksums,
// configuration digests, the first checkpoint format, cluster profiles). It
// is cheap and stable across builds and hosts; it is not cryptographic, and
// nothing relies on it against an adversary (transport security does that).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace frugal {

inline constexpr uint64_t kFnv1a64Offset = 0xcbf29ce484222325ULL;
inline constexpr uint64_t kFnv1a64Prime = 0x100000001b3ULL;

// Over bytes, continuing from `h`.
inline uint64_t Fnv1a64(const uint8_t* data, size_t n, uint64_t h = kFnv1a64Offset) {
  for (size_t i = 0; i < n; ++i) h = (h ^ data[i]) * kFnv1a64Prime;
  return h;
}
inline uint64_t Fnv1a64(std::string_view text, uint64_t h = kFnv1a64Offset) {
  return Fnv1a64(reinterpret_cast<const uint8_t*>(text.data()), text.size(), h);
}

// Over the 32-bit words of fp32 values (one step per value, not per byte),
// continuing from `h`: the replicas' parameter fingerprint.
inline uint64_t Fnv1a64Words(const float* data, size_t n, uint64_t h = kFnv1a64Offset) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t w;
    std::memcpy(&w, &data[i], sizeof(w));
    h = (h ^ w) * kFnv1a64Prime;
  }
  return h;
}

}  // namespace frugal
