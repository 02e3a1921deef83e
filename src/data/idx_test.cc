#include "frugal/data/idx.h"

#include <zlib.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace frugal::data {
namespace {

std::vector<uint8_t> MakeIdx(std::vector<uint32_t> dims) {
  std::vector<uint8_t> out = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  size_t n = 1;
  for (uint32_t d : dims) {
    out.push_back(d >> 24);
    out.push_back((d >> 16) & 0xff);
    out.push_back((d >> 8) & 0xff);
    out.push_back(d & 0xff);
    n *= d;
  }
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(i * 7));
  return out;
}

TEST(IdxTest, ParsesValidArray) {
  auto r = ParseIdx(MakeIdx({3, 2, 2}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->dims, (std::vector<uint32_t>{3, 2, 2}));
  ASSERT_EQ(r->data.size(), 12u);
  EXPECT_EQ(r->data[5], 35);
}

TEST(IdxTest, RejectsCorruptHeaders) {
  EXPECT_EQ(ParseIdx({}).status().code(), Status::Code::kCorruption);
  EXPECT_EQ(ParseIdx({0, 0, 8}).status().code(), Status::Code::kCorruption);
  auto bad_magic = MakeIdx({2});
  bad_magic[0] = 1;
  EXPECT_NE(ParseIdx(bad_magic).status().message().find("magic"), std::string::npos);
  auto bad_type = MakeIdx({2});
  bad_type[2] = 0x0D;  // float
  EXPECT_NE(ParseIdx(bad_type).status().message().find("element type"), std::string::npos);
  auto zero_dims = MakeIdx({2});
  zero_dims[3] = 0;
  EXPECT_FALSE(ParseIdx(zero_dims).ok());
  auto many_dims = MakeIdx({2});
  many_dims[3] = 200;
  EXPECT_FALSE(ParseIdx(many_dims).ok());
}

TEST(IdxTest, RejectsTruncatedAndOversizedData) {
  auto truncated = MakeIdx({10, 10});
  truncated.pop_back();
  auto r = ParseIdx(truncated);
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption);
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos);
  auto trailing = MakeIdx({10, 10});
  trailing.push_back(1);
  EXPECT_NE(ParseIdx(trailing).status().message().find("trailing"), std::string::npos);
  // Dimensions whose product is absurd must not allocate or crash.
  std::vector<uint8_t> huge = {0, 0, 8, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  EXPECT_FALSE(ParseIdx(huge).ok());
}

TEST(IdxTest, ReadsGzipAndRejectsTruncatedGzip) {
  auto dir = std::filesystem::temp_directory_path() / "frugal_idx_test";
  std::filesystem::create_directories(dir);
  std::string path = (dir / "a.gz").string();
  auto payload = MakeIdx({50, 50});
  gzFile gz = gzopen(path.c_str(), "wb");
  gzwrite(gz, payload.data(), payload.size());
  gzclose(gz);
  auto bytes = ReadMaybeGzipFile(path);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(*bytes, payload);

  // Cut the compressed file in half.
  auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size / 2);
  auto cut = ReadMaybeGzipFile(path);
  EXPECT_EQ(cut.status().code(), Status::Code::kCorruption);
  EXPECT_NE(cut.status().message().find(path), std::string::npos);

  // Garbage that is not gzip at all.
  std::ofstream(path, std::ios::binary) << "this is not gzip data at all";
  EXPECT_EQ(ReadMaybeGzipFile(path).status().code(), Status::Code::kCorruption);

  EXPECT_EQ(ReadMaybeGzipFile((dir / "missing.gz").string()).status().code(), Status::Code::kNotFound);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace frugal::data
