// The text (gpt-tiny) path of the training pieces: byte windows as int64
// batches, evaluation in nats and bits per character, option checks.
#include "frugal/train/training_data.h"

#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "frugal/data/text_corpus.h"
#include "frugal/models/model.h"

namespace frugal::train {
namespace {

std::string RepetitiveText(size_t n) {
  const std::string verse = "And God said, Let there be light: and there was light. ";
  std::string s;
  while (s.size() < n) s += verse;
  return s.substr(0, n);
}

TEST(TextTrainingData, BatchesAreShiftedByteWindows) {
  const std::string text = RepetitiveText(4096);
  Result<data::Dataset> ds = data::MakeTextDataset(text, data::Split::kTrain, 128, 1024);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  TensorDataset t = ToTensorDataset(std::move(*ds));
  EXPECT_EQ(t.size, (4096 - 1024 - 1) / 128);
  Batch b = MakeBatch(t, {2, 0}, torch::kCPU);
  ASSERT_EQ(b.x.sizes(), (std::vector<int64_t>{2, 128}));
  EXPECT_EQ(b.x.scalar_type(), torch::kLong);
  EXPECT_EQ(b.y.scalar_type(), torch::kLong);
  for (int64_t j = 0; j < 128; ++j) {
    EXPECT_EQ(b.x[0][j].item<int64_t>(), static_cast<uint8_t>(text[2 * 128 + j]));
    EXPECT_EQ(b.y[0][j].item<int64_t>(), static_cast<uint8_t>(text[2 * 128 + j + 1]));
  }
}

// A few AdamW steps on a repetitive text lower the validation loss; the
// evaluation reports it in nats and in bits per character.
TEST(TextTrainingData, GptTinyLearnsAndEvaluationReportsBitsPerChar) {
  const std::string text = RepetitiveText(8192);
  auto train = data::MakeTextDataset(text, data::Split::kTrain, models::kGptTinyContext, 1024);
  auto val = data::MakeTextDataset(text, data::Split::kTest, models::kGptTinyContext, 1024);
  ASSERT_TRUE(train.ok() && val.ok());
  TensorDataset tr = ToTensorDataset(std::move(*train)), va = ToTensorDataset(std::move(*val));
  torch::manual_seed(0);
  auto model = models::CreateModel("gpt-tiny", data::kByteVocab);
  ASSERT_TRUE(model.ok());
  TrainOptions o;
  o.optimizer = OptimizerKind::kAdamW;
  o.lr = 3e-3;
  auto opt = MakeTorchOptimizer(o, (*model)->parameters());
  ASSERT_TRUE(opt.ok());

  const Evaluation before = EvaluateModel(**model, va, torch::kCPU);
  EXPECT_TRUE(before.text);
  EXPECT_NEAR(before.bits_per_char(), before.loss / std::log(2.0), 1e-12);
  EXPECT_TRUE(before.Fields().contains("val_loss"));
  EXPECT_TRUE(before.Fields().contains("bits_per_char"));
  (*model)->train();
  for (int step = 0; step < 15; ++step) {
    Batch b = MakeBatch(tr, {step % tr.size, (step + 7) % tr.size}, torch::kCPU);
    (*opt)->zero_grad();
    torch::nn::functional::cross_entropy((*model)->forward(b.x), b.y).backward();
    (*opt)->step();
  }
  const Evaluation after = EvaluateModel(**model, va, torch::kCPU);
  EXPECT_LT(after.loss, before.loss - 1.0) << before.loss << " -> " << after.loss;
  EXPECT_GT(after.accuracy, before.accuracy);
}

TEST(TextTrainingData, ImageEvaluationHasNoTextFields) {
  Evaluation e;
  EXPECT_TRUE(e.Fields().empty());
}

TEST(TextTrainingData, ModelAndDatasetMustMatch) {
  TrainOptions o;
  o.model = "gpt-tiny";
  Status s = o.Validate();
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.ToString().find("--dataset text"), std::string::npos) << s.ToString();
  o.dataset = DatasetKind::kText;
  EXPECT_TRUE(o.Validate().ok());
  o.model = "mlp";
  EXPECT_EQ(o.Validate().code(), Status::Code::kInvalidArgument);
}

TEST(TextTrainingData, MissingCorpusIsNotFound) {
  TrainOptions o;
  o.model = "gpt-tiny";
  o.dataset = DatasetKind::kText;
  o.text_file = "/nonexistent/corpus.txt";
  Result<TrainingData> d = LoadTrainingData(o);
  EXPECT_EQ(d.status().code(), Status::Code::kNotFound);
  EXPECT_NE(d.status().ToString().find("/nonexistent/corpus.txt"), std::string::npos);
}

}  // namespace
}  // namespace frugal::train
