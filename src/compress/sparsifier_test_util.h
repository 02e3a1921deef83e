// Test helpers shared by the sparsifier test files.
#ifndef FRUGAL_SRC_COMPRESS_SPARSIFIER_TEST_UTIL_H_
#define FRUGAL_SRC_COMPRESS_SPARSIFIER_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "frugal/compress/sparsifier.h"

namespace frugal::compress::test_util {

// Heavy-tailed values (Student-t like: normal / sqrt(uniform)), with some exact
// zeros and repeated magnitudes so tie-breaking is exercised.
inline std::vector<float> HeavyTailed(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.05f, 1.0f);
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t r = rng() % 16;
    if (r == 0) g[i] = 0.0f;
    else if (r == 1) g[i] = (rng() & 1) ? 0.5f : -0.5f;
    else g[i] = scale * normal(rng) / std::sqrt(uni(rng));
  }
  return g;
}

inline std::unique_ptr<Sparsifier> Make(const std::string& kind, SparsifierOptions options = {}) {
  auto s = CreateSparsifier(kind, options);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

// Brute force: sort all indices by (|g| desc, index asc), take k, sort by index.
inline std::vector<uint32_t> BruteTopk(const std::vector<float>& g, size_t k) {
  std::vector<uint32_t> idx(g.size());
  std::iota(idx.begin(), idx.end(), 0u);
  std::sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) {
    float ma = std::fabs(g[a]), mb = std::fabs(g[b]);
    return ma > mb || (ma == mb && a < b);
  });
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

}  // namespace frugal::compress::test_util

#endif  // FRUGAL_SRC_COMPRESS_SPARSIFIER_TEST_UTIL_H_
