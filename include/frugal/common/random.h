// SplitMix64: a tiny, fully specified pseudo-random generator. Used wherever
// a sequence must be reproducible bit for bit across platforms and in the
// Python baselines (std::shuffle and std::uniform_int_distribution are not
// specified precisely enough for that).
#pragma once

#include <cstdint>

namespace frugal {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, n) by modulo (the bias is below 2^-40 for n < 2^24 and is
  // accepted for simplicity of reproduction). REQUIRES: n > 0.
  uint64_t Below(uint64_t n) { return Next() % n; }

  // Uniform in [0, 1) with 53 random bits.
  double NextDouble() { return static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0); }

 private:
  uint64_t state_;
};

}  // namespace frugal
