#include "frugal/compress/round_kernels.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "frugal/compress/sparse_vector.h"

namespace frugal::compress {
namespace {

// Values with every kind of float a round meets: wide exponents, both
// zeros, subnormals, and pairs that cancel exactly.
std::vector<float> Mixed(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-140, 30);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    switch (rng() % 8) {
      case 0: v[i] = 0.0f; break;
      case 1: v[i] = -0.0f; break;
      case 2: v[i] = 1e-40f * mant(rng); break;  // subnormal
      default: v[i] = std::ldexp(mant(rng), ex(rng)); break;
    }
  }
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 4 * a.size()) == 0;
}

// Sizes around every vector width and unrolling the compiler may pick.
const size_t kSizes[] = {0, 1, 7, 15, 16, 17, 63, 64, 65, 1000, 4099};

TEST(RoundKernels, PseudoGradientMatchesElementLoopBitForBit) {
  for (size_t n : kSizes) {
    const std::vector<float> anchor = Mixed(n, 1), master = Mixed(n, 2);
    std::vector<float> want_delta(n), want_base(n), delta(n, 7.0f), base(n, 7.0f);
    for (size_t i = 0; i < n; ++i) {
      want_delta[i] = anchor[i] - master[i];
      want_base[i] = master[i];
    }
    PseudoGradient(anchor, master, Span<float>(delta), Span<float>(base));
    EXPECT_TRUE(SameBits(delta, want_delta)) << n;
    EXPECT_TRUE(SameBits(base, want_base)) << n;
  }
}

TEST(RoundKernels, RebaseMatchesElementLoopBitForBit) {
  for (size_t n : kSizes) {
    const std::vector<float> anchor = Mixed(n, 3), base = Mixed(n, 4);
    std::vector<float> master = Mixed(n, 5), want = master;
    for (size_t i = 0; i < n; ++i) want[i] = anchor[i] - (base[i] - want[i]);
    Rebase(anchor, base, Span<float>(master));
    EXPECT_TRUE(SameBits(master, want)) << n;
  }
}

// The scaled Densify, on every index (the contiguous path) and on a subset
// (the scatter path), against the loop the exchange used before.
TEST(RoundKernels, ScaledDensifyMatchesScatterBitForBit) {
  std::mt19937 rng(6);
  for (size_t n : kSizes) {
    for (double density : {1.0, 0.3, 0.0}) {
      SparseVector v;
      v.dense_size = n;
      const std::vector<float> values = Mixed(n, 7);
      for (size_t i = 0; i < n; ++i) {
        if (density == 1.0 || std::uniform_real_distribution<double>(0, 1)(rng) < density) {
          v.indices.push_back(static_cast<uint32_t>(i));
          v.values.push_back(values[i]);
        }
      }
      for (float scale : {1.0f, 0.25f, 1.0f / 3.0f}) {
        std::vector<float> want(n, 0.0f), got(n, 9.0f);
        for (size_t j = 0; j < v.nnz(); ++j) want[v.indices[j]] = v.values[j] * scale;
        Densify(v, scale, Span<float>(got));
        EXPECT_TRUE(SameBits(got, want)) << n << " " << density << " " << scale;
      }
      std::vector<float> plain(n, 9.0f), want(n, 0.0f);
      for (size_t j = 0; j < v.nnz(); ++j) want[v.indices[j]] = v.values[j];
      Densify(v, Span<float>(plain));
      EXPECT_TRUE(SameBits(plain, want)) << n << " " << density;
    }
  }
}

}  // namespace
}  // namespace frugal::compress
