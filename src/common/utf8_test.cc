#include "frugal/common/utf8.h"
#include "frugal/common/toml_text.h"

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
TEST(TomlTextTest, RefusesBinaryIntegersToml11WouldOverflow) {
  EXPECT_EQ(TomlTextProblem("a = 0b" + std::string(62, '1') + "\n"), "");
  EXPECT_EQ(TomlTextProblem("a = 0b1_0\nb = 0xff\nname = \"bob\""), "");
  // 63 digits, leading zeros counted (toml11 doubles its place value for each).
  EXPECT_EQ(TomlTextProblem("x = 1\na = 0b" + std::string(63, '0')),
            "2: binary integer at byte 10 has 63 digits; at most 62 are accepted");
  EXPECT_EQ(TomlTextProblem("a = 0b" + std::string(40, '1') + "_" + std::string(30, '1')).substr(0, 3), "1: ");
  EXPECT_EQ(TomlTextProblem("ab\n\x8D"), "2: not UTF-8 text (byte 3)");
  EXPECT_EQ(TomlTextProblem("x0b" + std::string(80, '1')), "");  // not a literal's start
}

// Regression (found by sim_fuzz): "se = [[[[..." 300 deep overflowed
// toml11's recursive parser's stack.
TEST(TomlTextTest, RefusesNestingToml11WouldRecurseTooDeeply) {
  const std::string ok = "a = " + std::string(64, '[') + std::string(64, ']') + "\n[t]\n[[arr]]\nb = {c = {d = 1}}\n";
  EXPECT_EQ(TomlTextProblem(ok), "");
  EXPECT_EQ(TomlTextProblem("x = 1\nse = " + std::string(300, '[')),
            "2: arrays or inline tables nested more than 64 deep (byte 75)");
  EXPECT_NE(TomlTextProblem("a = " + std::string(65, '{')), "");
  // Brackets inside strings and comments do not count.
  const std::string many(200, '[');
  EXPECT_EQ(TomlTextProblem("a = \"" + many + "\"\nb = '" + many + "'\n# " + many + "\nc = \"\"\"\n" + many +
                            "\"\"\"\nd = \"esc \\\" " + many + "\"\n"),
            "");
  // Sequential arrays do not add up.
  std::string flat;
  for (int i = 0; i < 100; ++i) flat += "k" + std::to_string(i) + " = [[1], [2]]\n";
  EXPECT_EQ(TomlTextProblem(flat), "");
}

}  // namespace frugal
