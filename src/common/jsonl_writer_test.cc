#include "frugal/common/jsonl_writer.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace frugal {
namespace {

TEST(JsonlWriterTest, WritesOneObjectPerLine) {
  auto dir = std::filesystem::temp_directory_path() / "frugal_jsonl_test" / "nested";
  std::filesystem::remove_all(dir.parent_path());
  std::string path = (dir / "m.jsonl").string();
  {
    auto w = JsonlWriter::Open(path, /*truncate=*/true);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE((*w)->Write({{"step", 1}, {"loss", 0.5}}).ok());
    ASSERT_TRUE((*w)->Write({{"step", 2}}).ok());
  }
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(nlohmann::json::parse(line)["step"], 1);
  std::getline(in, line);
  EXPECT_EQ(nlohmann::json::parse(line)["step"], 2);
  EXPECT_FALSE(std::getline(in, line));
  std::filesystem::remove_all(dir.parent_path());
}

TEST(JsonlWriterTest, UnwritablePathIsAnError) {
  auto w = JsonlWriter::Open("/proc/frugal-no/such/m.jsonl", true);
  EXPECT_FALSE(w.ok());
}

}  // namespace
}  // namespace frugal
