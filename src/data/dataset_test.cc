#include "frugal/data/dataset.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace frugal::data {
namespace {

TEST(DatasetTest, SyntheticIsDeterministicAndLabelled) {
  Dataset a = MakeSynthetic(64, 5);
  Dataset b = MakeSynthetic(64, 5);
  Dataset c = MakeSynthetic(64, 6);
  EXPECT_EQ(a.images, b.images);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_NE(a.images, c.images);
  EXPECT_EQ(a.images.size(), 64u * 784u);
  for (int64_t l : a.labels) {
    EXPECT_GE(l, 0);
    EXPECT_LT(l, 10);
  }
}

TEST(DatasetTest, MissingDirectoryIsNotFound) {
  auto r = LoadFashionMnist("/nonexistent/dir", Split::kTrain);
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/dir"), std::string::npos);
}

TEST(DatasetTest, CorruptFileIsReportedWithItsName) {
  auto dir = std::filesystem::temp_directory_path() / "frugal_dataset_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "t10k-images-idx3-ubyte", std::ios::binary) << "garbage";
  std::ofstream(dir / "t10k-labels-idx1-ubyte", std::ios::binary) << "garbage";
  auto r = LoadFashionMnist(dir.string(), Split::kTest);
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption);
  EXPECT_NE(r.status().message().find("t10k-images"), std::string::npos) << r.status().ToString();
  std::filesystem::remove_all(dir);
}

TEST(DatasetTest, RealFashionMnistTestSplitLoads) {
  if (!std::filesystem::exists(kFashionMnistDir)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  auto r = LoadFashionMnist(kFashionMnistDir, Split::kTest);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->size, 10000);
  EXPECT_EQ(r->height, 28);
  std::vector<int> counts(10, 0);
  for (int64_t l : r->labels) counts[l]++;
  for (int c : counts) EXPECT_EQ(c, 1000);  // the test split is balanced
  double mean = 0;
  for (float v : r->images) mean += v;
  mean /= r->images.size();
  EXPECT_NEAR(mean, 0.0, 0.05);  // normalised with the training-set mean
}

}  // namespace
}  // namespace frugal::data
