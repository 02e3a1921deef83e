#include "frugal/train/run_reporter.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace frugal::train {
namespace {

std::vector<nlohmann::json> ReadRecords(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

class RunReporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("frugal_run_reporter_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<RunReporter> Open(Clock* clock, std::FILE* out) {
    RunReporterOptions o;
    o.metrics_path = (dir_ / "metrics.jsonl").string();
    o.log_every = 2;
    o.total_steps = 4;
    o.progress_out = out;
    o.clock = clock;
    auto r = RunReporter::Create(o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return std::move(*r);
  }

  std::filesystem::path dir_;
};

// The window's span, the record's times and samples/s all come from the
// clock the reporter is given.
TEST_F(RunReporterTest, WindowTimesComeFromTheGivenClock) {
  ManualClock clock;
  std::FILE* devnull = std::fopen("/dev/null", "w");
  ASSERT_NE(devnull, nullptr);
  std::unique_ptr<RunReporter> r = Open(&clock, devnull);
  clock.AdvanceSeconds(1.0);
  r->AddStep(/*loss=*/2.0, /*samples=*/64, /*compute_s=*/0.25);
  clock.AdvanceSeconds(1.0);
  r->AddStep(/*loss=*/1.0, /*samples=*/64, /*compute_s=*/0.75);
  EXPECT_DOUBLE_EQ(r->window().span_s, 2.0);
  EXPECT_DOUBLE_EQ(r->window().compute_s, 0.5);
  ASSERT_TRUE(r->CloseWindow(2, 0, 0.1).ok());

  r->ExcludeFromTrainTime(1.0);
  clock.AdvanceSeconds(4.0);  // the second window: 4 s, of which 1 s evaluating
  r->AddStep(1.0, 32, 0.1);
  r->AddStep(1.0, 32, 0.1);
  EXPECT_DOUBLE_EQ(r->window().span_s, 4.0);
  ASSERT_TRUE(r->CloseWindow(4, 1, 0.05, {{"extra_key", 7}}).ok());
  r->Finish();
  std::fclose(devnull);

  const std::vector<nlohmann::json> recs = ReadRecords(r->metrics_path());
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_DOUBLE_EQ(recs[0]["wall_time_s"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(recs[0]["train_time_s"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(recs[0]["samples_per_s"].get<double>(), 64.0);
  EXPECT_DOUBLE_EQ(recs[0]["loss"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(recs[1]["wall_time_s"].get<double>(), 6.0);
  EXPECT_DOUBLE_EQ(recs[1]["train_time_s"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(recs[1]["samples_per_s"].get<double>(), 16.0);
  EXPECT_EQ(recs[1]["step"].get<int64_t>(), 4);
  EXPECT_EQ(recs[1]["extra_key"].get<int>(), 7);
}

// A window record's keys are the WindowRecord list's names, and nothing else
// when the loop adds nothing.
TEST_F(RunReporterTest, RecordKeysAreTheFieldList) {
  ManualClock clock;
  std::FILE* devnull = std::fopen("/dev/null", "w");
  ASSERT_NE(devnull, nullptr);
  std::unique_ptr<RunReporter> r = Open(&clock, devnull);
  r->AddStep(1.0, 8, 0.0);
  clock.AdvanceSeconds(0.5);
  ASSERT_TRUE(r->CloseWindow(1, 0, 0.1).ok());
  std::fclose(devnull);
  const std::vector<nlohmann::json> recs = ReadRecords(r->metrics_path());
  ASSERT_EQ(recs.size(), 1u);
  std::vector<std::string> keys;
  for (const auto& [k, v] : recs[0].items()) keys.push_back(k);
  std::vector<std::string> expected = StatKeys<WindowRecord>();
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(keys, expected);  // nlohmann::json keeps its keys sorted
  EXPECT_TRUE(recs[0]["step"].is_number_integer());
  EXPECT_TRUE(recs[0]["epoch"].is_number_integer());
}

}  // namespace
}  // namespace frugal::train
