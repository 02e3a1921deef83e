#include "frugal/train/trainer.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "frugal/train/training_data.h"

namespace frugal::train {
namespace {

TrainOptions SyntheticOptions(const std::string& run) {
  TrainOptions o;
  o.dataset = DatasetKind::kSynthetic;
  o.synthetic_train_size = 1024;
  o.synthetic_test_size = 256;
  o.epochs = 2;
  o.batch_size = 32;
  o.lr = 0.01;
  o.warmup_steps = 5;
  o.log_every = 8;
  o.runs_dir = (std::filesystem::temp_directory_path() / "frugal_trainer_test").string();
  o.run_name = run;
  o.quiet = true;
  o.threads = 1;
  return o;
}

std::vector<nlohmann::json> ReadMetrics(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(TrainerTest, LossDecreasesAndAccuracyRisesOnSyntheticData) {
  auto trainer = Trainer::Create(SyntheticOptions("loss"));
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  auto before = (*trainer)->Evaluate();
  ASSERT_TRUE(before.ok());
  auto result = (*trainer)->Run();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->steps, 64);
  EXPECT_EQ(result->epochs_completed, 2);
  EXPECT_GT(result->final_test_accuracy, 0.9);
  EXPECT_GT(result->final_test_accuracy, *before + 0.3);

  auto records = ReadMetrics(result->metrics_path);
  ASSERT_GE(records.size(), 4u);
  double first_loss = records.front()["loss"];
  double last_loss = records.back()["loss"];
  EXPECT_LT(last_loss, first_loss * 0.5);
  int evaluations = 0;
  for (const auto& r : records) {
    EXPECT_TRUE(r.contains("wall_time_s") && r.contains("step") && r.contains("samples_per_s"));
    // Training time leaves out the evaluations: from the first one on, it
    // is strictly less than the wall time.
    ASSERT_TRUE(r.contains("train_time_s"));
    evaluations += r.contains("test_accuracy");
    if (evaluations == 0) {
      EXPECT_DOUBLE_EQ(r["train_time_s"].get<double>(), r["wall_time_s"].get<double>());
    } else {
      EXPECT_LT(r["train_time_s"].get<double>(), r["wall_time_s"].get<double>());
    }
  }
  EXPECT_EQ(evaluations, 2);  // once per epoch
}

// The run's times are the given clock's: one that never moves puts every
// record at time 0, evaluations included.
TEST(TrainerTest, TimesComeFromTheGivenClock) {
  TrainOptions o = SyntheticOptions("clock");
  o.epochs = 1;
  ManualClock clock;
  auto trainer = Trainer::Create(o, &clock);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  auto result = (*trainer)->Run();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->wall_time_s, 0.0);
  auto records = ReadMetrics(result->metrics_path);
  ASSERT_FALSE(records.empty());
  for (const auto& r : records) {
    EXPECT_EQ(r["wall_time_s"].get<double>(), 0.0);
    EXPECT_EQ(r["train_time_s"].get<double>(), 0.0);
  }
}

TEST(TrainerTest, SeededRunsAreReproducible) {
  TrainOptions o = SyntheticOptions("repro");
  o.epochs = 1;
  o.model = "cnn";
  o.optimizer = OptimizerKind::kAdamW;
  o.lr = 1e-3;
  o.weight_decay = 0.01;
  auto a = Trainer::Create(o);
  auto b = Trainer::Create(o);
  ASSERT_TRUE(a.ok() && b.ok());
  auto ra = (*a)->Run();
  auto rb = (*b)->Run();
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(ra->final_loss, rb->final_loss);
  EXPECT_EQ(ra->final_test_accuracy, rb->final_test_accuracy);
}

TEST(TrainerTest, BadOptionsNameTheOption) {
  TrainOptions o = SyntheticOptions("bad");
  o.batch_size = 0;
  auto t = Trainer::Create(o);
  EXPECT_EQ(t.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(t.status().message().find("--batch-size"), std::string::npos);
  o = SyntheticOptions("bad");
  o.device = "toaster";
  EXPECT_NE(Trainer::Create(o).status().message().find("--device"), std::string::npos);
  o = SyntheticOptions("bad");
  o.dataset = DatasetKind::kFashionMnist;
  o.data_dir = "/nonexistent";
  EXPECT_EQ(Trainer::Create(o).status().code(), Status::Code::kNotFound);
}

TEST(TrainerTest, DivergenceIsAnError) {
  TrainOptions o = SyntheticOptions("diverge");
  o.lr = 1e12;
  o.warmup_steps = 0;
  o.lr_schedule = LrScheduleKind::kConstant;
  auto t = Trainer::Create(o);
  ASSERT_TRUE(t.ok());
  auto r = (*t)->Run();
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("diverged"), std::string::npos) << r.status().ToString();
}

// A finite but exploding loss is a divergence too: a run whose loss reached
// 4e15 finished "successfully" at 10% accuracy before this check.
TEST(TrainerTest, CheckLossRejectsNonFiniteAndExploding) {
  EXPECT_TRUE(CheckLoss(2.3, 5, "").ok());
  EXPECT_TRUE(CheckLoss(kDivergedLoss, 5, "").ok());
  Status huge = CheckLoss(4e15, 250, "rank 1");
  EXPECT_EQ(huge.code(), Status::Code::kInternal);
  EXPECT_NE(huge.message().find("diverged on rank 1"), std::string::npos) << huge.ToString();
  EXPECT_NE(huge.message().find("step 250"), std::string::npos) << huge.ToString();
  EXPECT_FALSE(CheckLoss(std::nan(""), 1, "").ok());
  EXPECT_FALSE(CheckLoss(-std::numeric_limits<double>::infinity(), 1, "").ok());
}

}  // namespace
}  // namespace frugal::train
