#include "frugal/common/utf8.h"

#include <gtest/gtest.h>

namespace frugal {
namespace {

TEST(Utf8Test, AcceptsWellFormedText) {
  EXPECT_EQ(FirstInvalidUtf8(""), std::string::npos);
  EXPECT_EQ(FirstInvalidUtf8("plain ascii = 'x'\n"), std::string::npos);
  EXPECT_EQ(FirstInvalidUtf8("name = \"gr\xC3\xBC\xC3\x9F \xE2\x82\xAC \xF0\x9F\x98\x80\""), std::string::npos);
}

TEST(Utf8Test, NamesTheFirstMalformedByte) {
  EXPECT_EQ(FirstInvalidUtf8("ab\x8D"), 2u);              // stray continuation byte
  EXPECT_EQ(FirstInvalidUtf8("a\xC3"), 1u);               // truncated sequence
  EXPECT_EQ(FirstInvalidUtf8("\xC0\xAF"), 0u);            // overlong '/'
  EXPECT_EQ(FirstInvalidUtf8("x\xED\xA0\x80"), 1u);       // UTF-16 surrogate
  EXPECT_EQ(FirstInvalidUtf8("\xF4\x90\x80\x80"), 0u);    // above U+10FFFF
  EXPECT_EQ(FirstInvalidUtf8("ok\xFF"), 2u);
}

}  // namespace
}  // namespace frugal
