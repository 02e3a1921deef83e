#include "frugal/common/csv.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace frugal {
namespace {

void ExpectCorruption(const Status& st, const std::string& fragment) {
  EXPECT_EQ(st.code(), Status::Code::kCorruption) << st.ToString();
  EXPECT_NE(st.message().find(fragment), std::string::npos) << st.message();
}

TEST(CsvTableTest, SplitsQuotedTrimmedFieldsAndSkipsBlankLines) {
  Result<CsvTable> t = CsvTable::Parse(
      "\xEF\xBB\xBFname, value ,note\r\n\n  \nA, 1.5 ,\"x, \"\"y\"\"\"\r\nb,2,\n", "t.csv");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->header(), (std::vector<std::string>{"name", "value", "note"}));
  EXPECT_EQ(t->header_line(), 1);
  ASSERT_EQ(t->NumRows(), 2u);
  EXPECT_EQ(t->Field(0, 0), "A");
  EXPECT_EQ(t->Field(0, 2), "x, \"y\"");
  EXPECT_EQ(t->Field(1, 2), "");
  EXPECT_EQ(t->Line(0), 4);
  EXPECT_EQ(t->Where(1), "t.csv:5");
  Result<int> col = t->Column("value");
  ASSERT_TRUE(col.ok());
  EXPECT_DOUBLE_EQ(*t->Number(0, *col), 1.5);
  EXPECT_EQ(*t->Integer(1, *col), 2);
}

TEST(CsvTableTest, ErrorsNameSourceAndLine) {
  ExpectCorruption(CsvTable::Parse("a,b\n1,2\n\n3\n", "t.csv").status(), "t.csv:4: expected 2 fields, found 1");
  ExpectCorruption(CsvTable::Parse("\n \n", "t.csv").status(), "t.csv: no CSV header line");
  Result<CsvTable> t = CsvTable::Parse("\na,b\n1,x\n2.5,nan\ninf,1e999\n", "t.csv");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ExpectCorruption(t->Column("c").status(), "t.csv:2: missing column 'c' (header is 'a,b')");
  int a = -1, b = -1, c = -1;
  EXPECT_TRUE(t->Columns({{"b", &b}, {"a", &a}}).ok());
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 1);
  ExpectCorruption(t->Columns({{"a", &a}, {"c", &c}}), "t.csv:2: missing column 'c'");
  ExpectCorruption(t->Number(0, 1).status(), "t.csv:3: column 'b': 'x' is not a finite number");
  ExpectCorruption(t->Integer(1, 0).status(), "t.csv:4: column 'a': '2.5' is not an integer");
  ExpectCorruption(t->Number(1, 1).status(), "t.csv:4: column 'b': 'nan' is not a finite number");
  ExpectCorruption(t->Number(2, 0).status(), "t.csv:5: column 'a': 'inf' is not a finite number");
  ExpectCorruption(t->Number(2, 1).status(), "t.csv:5: column 'b': '1e999' is not a finite number");
  ExpectCorruption(t->Error(0, "bad row"), "t.csv:3: bad row");
}

TEST(CsvTableTest, HashCommentsAndAHeaderThatStartsWithHash) {
  CsvOptions o;
  o.hash_comments = true;
  Result<CsvTable> plain = CsvTable::Parse("# about, this file\nk,v\n  # a comment\nx,1\n", "t.csv", o);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->header_line(), 2);
  ASSERT_EQ(plain->NumRows(), 1u);
  EXPECT_EQ(plain->Line(0), 4);

  o.header_field = "# GPUs";
  Result<CsvTable> t = CsvTable::Parse("# Table 1, with commas\n# gpus,time\n# note\n8,1.5\n", "t.csv", o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->header_line(), 2);
  EXPECT_EQ(t->header()[0], "# gpus");
  ASSERT_EQ(t->NumRows(), 1u);
  EXPECT_EQ(t->Field(0, 0), "8");
}

TEST(CsvTableTest, BindColumnsIgnoresCaseAndChecksTheSet) {
  const std::vector<CsvColumn> known = {{"Model"}, {"Time (ms)"}, {"staleness", true}};
  Result<CsvTable> t = CsvTable::Parse("time (ms),MODEL\n1,mlp\n", "t.csv");
  ASSERT_TRUE(t.ok());
  Result<std::vector<int>> cols = t->BindColumns(known);
  ASSERT_TRUE(cols.ok()) << cols.status().ToString();
  EXPECT_EQ(*cols, (std::vector<int>{1, 0, -1}));
  EXPECT_EQ(t->FindColumn("Time (MS)"), 0);
  EXPECT_EQ(t->FindColumn("staleness"), -1);
  auto bind = [&](const std::string& header) { return CsvTable::Parse(header + "\n", "h.csv")->BindColumns(known); };
  ExpectCorruption(bind("model,colour").status(), "h.csv:1: unknown column 'colour'");
  ExpectCorruption(bind("model,Model,time (ms)").status(), "h.csv:1: column 'Model' appears twice");
  ExpectCorruption(bind("model").status(), "h.csv:1: missing column 'Time (ms)'");
}

// Found by fuzz/csv_fuzz.cc: a whole number beyond long long was converted
// anyway (undefined behaviour; UBSan: "7.77778e+34 is outside the range").
TEST(CsvTableTest, IntegerOutsideLongLongIsAnError) {
  Result<CsvTable> t = CsvTable::Parse("n\n77777777777777777777777777777777777\n-1e19\n9223372036854775807\n-4e18\n", "t.csv");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ExpectCorruption(t->Integer(0, 0).status(), "t.csv:2: column 'n': '77777777777777777777777777777777777' is out of range");
  ExpectCorruption(t->Integer(1, 0).status(), "t.csv:3: column 'n': '-1e19' is out of range");
  // 2^63 - 1 reads as the double 2^63, one past the largest long long.
  ExpectCorruption(t->Integer(2, 0).status(), "is out of range");
  ASSERT_TRUE(t->Integer(3, 0).ok());
  EXPECT_EQ(*t->Integer(3, 0), -4000000000000000000LL);
}

TEST(CsvTableTest, ParseFiniteNumber) {
  EXPECT_EQ(ParseFiniteNumber(" 2.5e3 "), 2500.0);
  EXPECT_EQ(ParseFiniteNumber("-0.5"), -0.5);
  for (const char* bad : {"", " ", "1.5x", "x", "nan", "NaN", "inf", "-Infinity", "1e999", "1,5"}) {
    EXPECT_FALSE(ParseFiniteNumber(bad).has_value()) << bad;
  }
}

TEST(CsvTableTest, ReadsFilesAndReportsMissingOnes) {
  const auto path = std::filesystem::temp_directory_path() / "frugal_csv_test.csv";
  {
    std::ofstream out(path);
    out << "a\n7\n";
  }
  Result<CsvTable> t = CsvTable::Read(path.string());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->source(), path.string());
  EXPECT_EQ(*t->Integer(0, 0), 7);
  std::filesystem::remove(path);
  EXPECT_EQ(CsvTable::Read("/nonexistent/x.csv").status().code(), Status::Code::kNotFound);
}

}  // namespace
}  // namespace frugal
