#include "frugal/data/text_corpus.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace frugal::data {
namespace {

// LZW with 9-bit codes only (enough for short windows: < 255 new entries).
std::vector<uint8_t> Lzw9(const std::string& text) {
  std::vector<std::pair<std::string, int>> table;
  auto find = [&](const std::string& s) -> int {
    if (s.size() == 1) return static_cast<uint8_t>(s[0]);
    for (const auto& [str, code] : table) {
      if (str == s) return code;
    }
    return -1;
  };
  std::vector<int> codes;
  std::string w;
  for (char c : text) {
    if (find(w + c) >= 0) {
      w += c;
      continue;
    }
    codes.push_back(find(w));
    table.emplace_back(w + c, 257 + static_cast<int>(table.size()));
    w = std::string(1, c);
  }
  if (!w.empty()) codes.push_back(find(w));
  std::vector<uint8_t> out((codes.size() * 9 + 7) / 8, 0);
  for (size_t i = 0; i < codes.size(); ++i) {
    for (int b = 0; b < 9; ++b) {
      if ((codes[i] >> b) & 1) out[(i * 9 + b) / 8] |= static_cast<uint8_t>(1 << ((i * 9 + b) % 8));
    }
  }
  return out;
}

void PutU32(std::vector<uint8_t>* b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) (*b)[at + i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

// A bible.data-format file holding `text` in windows of `window` bytes.
std::vector<uint8_t> MakeBibleData(const std::string& text, uint32_t window) {
  const uint32_t n = static_cast<uint32_t>((text.size() + window - 1) / window);
  std::vector<uint8_t> b(0x5c + 4 * (n + 1), 0);
  std::memcpy(b.data(), "EC02Compressed Data File", 24);
  PutU32(&b, 0x54, window);
  PutU32(&b, 0x58, n);
  b.insert(b.end(), {0x1f, 0x9d, 0x90});
  for (uint32_t i = 0; i < n; ++i) {
    PutU32(&b, 0x5c + 4 * i, static_cast<uint32_t>(b.size()));
    std::vector<uint8_t> w = Lzw9(text.substr(size_t{i} * window, window));
    b.insert(b.end(), w.begin(), w.end());
  }
  PutU32(&b, 0x5c + 4 * n, static_cast<uint32_t>(b.size()));
  return b;
}

const std::string kText = "In the beginning aaaaaaa God created the heaven and the earth. And the earth was without form.";

TEST(TextCorpus, DecodesWindowedLzw) {
  Result<std::string> text = DecodeBibleData(MakeBibleData(kText, 32));
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, kText);
}

TEST(TextCorpus, RejectsCorruptData) {
  const std::vector<uint8_t> good = MakeBibleData(kText, 32);
  std::vector<uint8_t> bad = good;
  bad[0] = 'X';
  EXPECT_EQ(DecodeBibleData(bad).status().code(), Status::Code::kCorruption);
  bad = good;
  bad.resize(bad.size() - 3);  // truncated: the last offset no longer matches
  EXPECT_EQ(DecodeBibleData(bad).status().code(), Status::Code::kCorruption);
  bad = good;
  PutU32(&bad, 0x54, 16);  // windows now decode to more than their size
  EXPECT_EQ(DecodeBibleData(bad).status().code(), Status::Code::kCorruption);
  bad = good;
  const uint32_t first = (uint32_t{bad[0x5c + 2]} << 8) | bad[0x5c + 3];
  bad[first] = 0xff;  // first code 0x1ff: past the empty table
  bad[first + 1] |= 1;
  Result<std::string> r = DecodeBibleData(bad);
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption);
  EXPECT_NE(r.status().ToString().find("window 0"), std::string::npos) << r.status().ToString();
  bad = good;
  bad.resize(0x40);
  EXPECT_EQ(DecodeBibleData(bad).status().code(), Status::Code::kCorruption);
}

TEST(TextCorpus, MissingFileIsNotFoundNamingThePackage) {
  Result<std::string> r = ReadTextCorpus("/nonexistent/bible.data");
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
  EXPECT_NE(r.status().ToString().find("bible-kjv-text"), std::string::npos);
}

TEST(TextCorpus, CorruptFileNamesThePath) {
  const std::string path = (std::filesystem::temp_directory_path() / "frugal_corrupt_bible.data").string();
  std::vector<uint8_t> bytes = MakeBibleData(kText, 32);
  bytes.resize(bytes.size() - 1);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
  Result<Dataset> r = LoadTextCorpus(path, Split::kTrain, 8, 16);
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption);
  EXPECT_NE(r.status().ToString().find(path), std::string::npos);
  std::ofstream(path, std::ios::binary | std::ios::trunc);  // empty
  EXPECT_EQ(LoadTextCorpus(path, Split::kTrain, 8, 16).status().code(), Status::Code::kCorruption);
  std::remove(path.c_str());
}

TEST(TextCorpus, SplitsIntoHeldOutTailAndWindows) {
  const std::string text = "abcdefghijklmnopqrstuvwxyz0123456789";  // 36 bytes
  Result<Dataset> train = MakeTextDataset(text, Split::kTrain, 4, 10);
  Result<Dataset> val = MakeTextDataset(text, Split::kTest, 4, 10);
  ASSERT_TRUE(train.ok() && val.ok());
  // Train: the first 26 bytes, (26 - 1) / 4 = 6 windows; validation: the last 10, 2 windows.
  EXPECT_EQ(train->size, 6);
  EXPECT_EQ(val->size, 2);
  EXPECT_EQ(train->num_classes, 256);
  EXPECT_EQ(std::string(train->tokens.begin(), train->tokens.end()), "abcdefghijklmnopqrstuvwxy");
  EXPECT_EQ(std::string(val->tokens.begin(), val->tokens.end()), "012345678");
  EXPECT_EQ(MakeTextDataset(text, Split::kTrain, 4, 40).status().code(), Status::Code::kCorruption);
  EXPECT_EQ(MakeTextDataset(text, Split::kTrain, 0, 10).status().code(), Status::Code::kInvalidArgument);
}

TEST(TextCorpus, DecodesDebiansKingJamesBible) {
  if (!std::filesystem::exists(kBibleKjvPath)) GTEST_SKIP() << "bible-kjv-text is not installed";
  Result<std::string> text = ReadTextCorpus(kBibleKjvPath);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(text->size(), 4404475u);
  EXPECT_EQ(text->rfind("Holy Bible, Authorized (King James) Version.", 0), 0u);
  EXPECT_NE(text->find("Ge1:1 In the beginning God created the heaven and the earth."), std::string::npos);
  EXPECT_EQ(text->substr(text->size() - 20), "with you all. Amen.\n");
}

}  // namespace
}  // namespace frugal::data
