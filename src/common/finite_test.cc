#include "frugal/common/finite.h"

#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

namespace frugal {
namespace {

TEST(FiniteTest, FindsEveryKindOfNonFiniteValueAtEveryPosition) {
  const float kinds[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::quiet_NaN()};
  for (size_t n : {1u, 7u, 64u, 1001u}) {
    std::vector<float> v(n, 1.5f);
    EXPECT_TRUE(AllFinite(v));
    EXPECT_EQ(FirstNonFinite(v), n);
    for (float bad : kinds) {
      for (size_t at : {size_t{0}, n / 2, n - 1}) {
        std::vector<float> w = v;
        w[at] = bad;
        EXPECT_FALSE(AllFinite(w)) << n << " " << at;
        EXPECT_EQ(FirstNonFinite(w), at);
      }
    }
  }
}

TEST(FiniteTest, ExtremeFiniteValuesAreFinite) {
  std::vector<float> v = {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(), -0.0f, 0.0f,
                          std::numeric_limits<float>::min()};
  EXPECT_TRUE(AllFinite(v));
  EXPECT_TRUE(AllFinite(Span<const float>()));
}

}  // namespace
}  // namespace frugal
