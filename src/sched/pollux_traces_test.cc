#include "pollux_traces.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "frugal/build_config.h"
#include "frugal/sched/throughput_model.h"
#include "test_data.h"

namespace frugal::sched {
namespace {

namespace fs = std::filesystem;

const std::string kTraces = SchedulerDataDir() + "/pollux-traces";

class SchedPolluxTracesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!HaveSchedulerData()) return;  // each test skips (SetUp)
    auto loaded = LoadPolluxTraces(kTraces);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    catalog_ = new ApplicationCatalog(std::move(loaded).value());
  }
  static void TearDownTestSuite() { delete catalog_; }
  void SetUp() override { FRUGAL_SKIP_WITHOUT_SCHEDULER_DATA(); }
  static ApplicationCatalog* catalog_;
};
ApplicationCatalog* SchedPolluxTracesTest::catalog_ = nullptr;

TEST_F(SchedPolluxTracesTest, LoadsAllSixApplications) {
  EXPECT_EQ(catalog_->Names(),
            (std::vector<std::string>{"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}));
  // Epoch counts from the README's job model.
  EXPECT_EQ(catalog_->Find("bert")->convergence().NumEpochs(), 2);
  EXPECT_EQ(catalog_->Find("cifar10")->convergence().NumEpochs(), 100);
  EXPECT_EQ(catalog_->Find("imagenet")->convergence().NumEpochs(), 90);
  EXPECT_EQ(catalog_->Find("yolov3")->convergence().NumEpochs(), 50);
}

TEST_F(SchedPolluxTracesTest, ExactPlacementMatchesTheCsv) {
  // bert/placements.csv: "1,4,0.45532354712486267,..." -> one GPU, local 4,
  // global batch 4.
  const Application* bert = catalog_->Find("bert");
  EXPECT_NEAR(bert->throughput().StepTime({1}, 4), 0.45532354712486267, 1e-12);
  // Between local 4 and 6 the step time is interpolated linearly.
  double t5 = bert->throughput().StepTime({1}, 5);
  EXPECT_NEAR(t5, (0.45532354712486267 + 0.5693899691104889) / 2, 1e-12);
}

TEST_F(SchedPolluxTracesTest, LargeLocalBatchAccumulatesGradients) {
  // yolov3 on one GPU at batch 16: local 16 > 8 (the README's limit), so one
  // accumulation micro-step of 8 plus one full step of 8.
  const auto* model = dynamic_cast<const PolluxThroughputModel*>(&catalog_->Find("yolov3")->throughput());
  ASSERT_NE(model, nullptr);
  StepSample s8 = model->Lookup({1}, 8);
  EXPECT_NEAR(model->StepTime({1}, 16), s8.step_time + (s8.step_time - s8.sync_time), 1e-12);
}

TEST_F(SchedPolluxTracesTest, SpreadingOverNodesIsSlower) {
  // The traces' placement effect: 4 GPUs in one node beat 4 GPUs on two
  // nodes at the batch sizes the Pollux workloads use. (Not for imagenet,
  // whose 2+2 measurements are slightly faster than 4; the model keeps the
  // data as measured.)
  const std::pair<const char*, int> cases[] = {
      {"ncf", 32768}, {"yolov3", 64}, {"cifar10", 2048}, {"deepspeech2", 320}, {"bert", 384}};
  for (const auto& [name, batch] : cases) {
    const Application* app = catalog_->Find(name);
    EXPECT_GT(app->ProgressRate({4}, batch, 0), app->ProgressRate({2, 2}, batch, 0)) << name;
  }
  // ncf loses a third of its throughput when spread over 4 nodes.
  const Application* ncf = catalog_->Find("ncf");
  EXPECT_LT(ncf->ProgressRate({1, 1, 1, 1}, 32768, 0), 0.75 * ncf->ProgressRate({4}, 32768, 0));
}

TEST_F(SchedPolluxTracesTest, GainIsOneAtBaseBatchAndBelowScaleAbove) {
  const ConvergenceModel& c = catalog_->Find("cifar10")->convergence();
  EXPECT_NEAR(c.StepGain(128, 0), 1.0, 1e-12);  // B0 = 128.
  double g = c.StepGain(1024, 10);
  EXPECT_GT(g, 1.0);
  EXPECT_LT(g, 1024.0 / 128.0);
}

TEST_F(SchedPolluxTracesTest, EpochEndIsMinimumOverRuns) {
  // bert epoch 1: validation-12 reaches 7387.0, validation-192 7395.8, ...
  const ConvergenceModel& c = catalog_->Find("bert")->convergence();
  EXPECT_LE(c.EpochEnd(1), 7387.0);
  EXPECT_GT(c.EpochEnd(1), 0);
  EXPECT_GE(c.EpochEnd(2), c.EpochEnd(1));
  EXPECT_EQ(c.EpochEnd(0), 0);
}

class SchedBadTracesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("frugal_sched_bad_" + std::to_string(::getpid()));
    fs::create_directories(dir_ / "app");
    Write("app/placements.csv", "placement,local_bsz,step_time,sync_time\n1,4,0.5,0.01\n2,4,0.3,0.02\n");
    Write("app/validation-8.csv", "progress,iteration,metric,grad_sqr,grad_var\n10,10,1,1,1\n20,20,1,1,1\n");
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& rel, const std::string& text) { std::ofstream(dir_ / rel) << text; }
  fs::path dir_;
};

TEST_F(SchedBadTracesTest, GoodMinimalDirectoryLoads) {
  auto loaded = LoadPolluxTraces(dir_.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_NE(loaded->Find("app"), nullptr);
}

TEST_F(SchedBadTracesTest, NonNumericStepTimeNamesFileAndLine) {
  Write("app/placements.csv", "placement,local_bsz,step_time,sync_time\n1,4,0.5,0.01\n2,4,fast,0.02\n");
  auto loaded = LoadPolluxTraces(dir_.string());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), Status::Code::kCorruption);
  EXPECT_NE(loaded.status().message().find("placements.csv:3"), std::string::npos) << loaded.status().message();
  EXPECT_NE(loaded.status().message().find("step_time"), std::string::npos);
}

TEST_F(SchedBadTracesTest, ShortRowNamesFileAndLine) {
  Write("app/validation-8.csv", "progress,iteration,metric,grad_sqr,grad_var\n10,10,1,1,1\n20,20,1\n");
  auto loaded = LoadPolluxTraces(dir_.string());
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("validation-8.csv:3"), std::string::npos) << loaded.status().message();
}

TEST_F(SchedBadTracesTest, BadPlacementIdIsRejected) {
  Write("app/placements.csv", "placement,local_bsz,step_time,sync_time\n1x,4,0.5,0.01\n");
  auto loaded = LoadPolluxTraces(dir_.string());
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("placements.csv:2"), std::string::npos) << loaded.status().message();
}

TEST_F(SchedBadTracesTest, MissingDirectoryIsNotFound) {
  auto loaded = LoadPolluxTraces((dir_ / "nope").string());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), Status::Code::kNotFound);
}

TEST(SchedThroughputTableTest, LoadsAndInterpolates) {
  fs::path p = fs::temp_directory_path() / ("frugal_sched_table_" + std::to_string(::getpid()) + ".csv");
  std::ofstream(p) << "application,total_samples,num_gpus,samples_per_s\nmlp,1000,1,100\nmlp,1000,4,300\n";
  ApplicationCatalog catalog;
  ASSERT_TRUE(LoadThroughputTable(p.string(), &catalog).ok());
  const Application* app = catalog.Find("mlp");
  ASSERT_NE(app, nullptr);
  // 2 GPUs: 100 + (300-100)/3 samples/s; rate is in samples/s.
  EXPECT_NEAR(app->ProgressRate({2}, 32, 0), 100 + 200.0 / 3, 1e-9);
  EXPECT_NEAR(app->ProgressRate({4, 4}, 32, 0), 300, 1e-9);  // Flat beyond the table.
  EXPECT_NEAR(app->TotalProgress(), 1000, 1e-12);
  std::ofstream(p) << "application,total_samples,num_gpus,samples_per_s\nmlp,1000,1,100\nmlp,1000,0,300\n";
  ApplicationCatalog bad;
  Status st = LoadThroughputTable(p.string(), &bad);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(":3"), std::string::npos) << st.message();
  fs::remove(p);
}

}  // namespace
}  // namespace frugal::sched
