#include "frugal/common/field_list.h"

#include <cmath>

#include <gtest/gtest.h>

namespace frugal {
namespace {

enum class Shade { kLight, kDark };

}  // namespace

template <>
struct EnumNames<Shade> {
  static constexpr std::pair<Shade, const char*> kTable[] = {{Shade::kLight, "light"}, {Shade::kDark, "dark"}};
};

namespace {

TEST(FieldListTest, RangesRejectNanInfAndOutOfRange) {
  Field density = Field("density", "g", "h").Positive().Max(1);
  EXPECT_TRUE(CheckField(density, 0.5).ok());
  EXPECT_TRUE(CheckField(density, 1.0).ok());
  Status s = CheckField(density, std::nan(""));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "--density must be in (0, 1], got nan");
  EXPECT_FALSE(CheckField(density, 0.0).ok());
  EXPECT_FALSE(CheckField(density, INFINITY).ok());
  Field workers = Field("workers", "g", "h").Min(1).Max(256, "one machine");
  Status w = CheckField(workers, int64_t{1000});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.message().find("one machine"), std::string::npos) << w.message();
  EXPECT_FALSE(CheckField(Field("lr", "g", "h"), -INFINITY).ok());  // every number is finite
}

TEST(FieldListTest, TextRoundTripsEveryType) {
  Field f("x", "g", "h");
  double d = 0;
  ASSERT_TRUE(FieldFromText(f, FieldToText(0.05), &d).ok());
  EXPECT_EQ(d, 0.05);
  EXPECT_EQ(FieldToText(0.05), "0.05");
  EXPECT_EQ(FieldToText(1e-7), "1e-07");
  int64_t i = 0;
  EXPECT_FALSE(FieldFromText(f, "3.5", &i).ok());
  EXPECT_FALSE(FieldFromText(f, "abc", &d).ok());
  uint64_t u = 0;
  EXPECT_FALSE(FieldFromText(f, "-1", &u).ok());
  Shade shade = Shade::kLight;
  ASSERT_TRUE(FieldFromText(f, "dark", &shade).ok());
  EXPECT_EQ(shade, Shade::kDark);
  Status bad = FieldFromText(f, "grey", &shade);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.message(), "--x: unknown value 'grey' (known: light, dark)");
  bool b = false;
  ASSERT_TRUE(FieldFromText(f, "true", &b).ok());
  EXPECT_TRUE(b);
}

TEST(FieldListTest, DigestTextIsExact) {
  EXPECT_NE(FieldDigestText(1e-7), FieldDigestText(2e-7));
  EXPECT_NE(FieldDigestText(0.1), FieldDigestText(std::nextafter(0.1, 1.0)));
  EXPECT_NE(Fnv1a64("a=1"), Fnv1a64("a=2"));
}

}  // namespace
}  // namespace frugal
