// Pieces of a training loop shared by the single-worker Trainer and the
// distributed engine: data on tensors, batches, evaluation, optimiser and
// schedule construction from TrainOptions. Uses LibTorch.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "frugal/common/status.h"
#include "frugal/data/dataset.h"
#include "frugal/models/model.h"
#include "frugal/train/lr_schedule.h"
#include "frugal/train/trainer.h"

namespace frugal::train {

// A dataset and a zero-copy tensor view of it. Text (storage->is_text()):
// images are the input windows [N, T] and labels the targets [N, T], both
// uint8 views of storage->tokens; MakeBatch hands them out as int64.
struct TensorDataset {
  std::shared_ptr<const data::Dataset> storage;
  torch::Tensor images;  // [N, C, H, W] float, views storage->images (text: [N, T] uint8)
  torch::Tensor labels;  // [N] int64, views storage->labels (text: [N, T] uint8)
  std::string name;
  int64_t size = 0;
  int64_t num_classes = 0;
};

struct TrainingData {
  TensorDataset train;
  TensorDataset test;
};

// Loads the train and test splits named by options.dataset.
Result<TrainingData> LoadTrainingData(const TrainOptions& options);
// On an accelerator, copies both splits there once (Fashion-MNIST takes
// ~220 MB), so MakeBatch gathers a batch on the device instead of copying it
// over (synchronously) every step. A no-op on the CPU.
void MoveToDevice(TrainingData* data, const torch::Device& device);

TensorDataset ToTensorDataset(data::Dataset ds);

struct Batch {
  torch::Tensor x;
  torch::Tensor y;
};

// Gathers `indices` into one batch on `device`.
Batch MakeBatch(const TensorDataset& ds, const std::vector<int64_t>& indices, const torch::Device& device);

// What one pass over an evaluation set measured. For text every position is
// a prediction: accuracy is next-byte accuracy and loss the validation loss.
struct Evaluation {
  double accuracy = 0;  // fraction of predictions that are right
  double loss = 0;      // mean cross-entropy per prediction, nats
  bool text = false;
  // Text: loss in bits per character (byte), loss / ln 2.
  double bits_per_char() const;
  // The metrics.jsonl fields besides test_accuracy: for text
  // {"val_loss", "bits_per_char"}, else none.
  nlohmann::json Fields() const;
};

// Unnormalised evaluation of a range of examples: sums that add up across
// ranges (a distributed evaluation splits the test set and adds them).
struct EvaluationSums {
  int64_t correct = 0;
  int64_t predictions = 0;
  double loss_sum = 0;  // summed cross-entropy, nats
  EvaluationSums& operator+=(const EvaluationSums& o);
};

// Evaluates examples [begin, end) of `ds` (model in eval mode, no grad).
// REQUIRES: 0 <= begin <= end <= ds.size.
EvaluationSums EvaluateRange(torch::nn::Module& model, const TensorDataset& ds, const torch::Device& device,
                             int64_t begin, int64_t end);
// The evaluation of sums over a whole dataset.
Evaluation FromSums(const EvaluationSums& sums, bool text);

// Evaluates `ds` (model in eval mode, no grad). Leaves the model in eval mode.
Evaluation EvaluateModel(torch::nn::Module& model, const TensorDataset& ds, const torch::Device& device);

// EvaluateModel(...).accuracy.
double EvaluateAccuracy(torch::nn::Module& model, const TensorDataset& ds, const torch::Device& device);

// LibTorch's dense optimiser for options.optimizer.
Result<std::unique_ptr<torch::optim::Optimizer>> MakeTorchOptimizer(const TrainOptions& options,
                                                                    std::vector<torch::Tensor> params);

LrScheduleOptions ScheduleOptions(const TrainOptions& options, int64_t total_steps);

// Internal "training diverged ..." for a loss that is not finite or above
// kDivergedLoss, else Ok. A cross-entropy loss that large means logits
// thousands apart: such a run does not recover, and the error stops it
// instead of letting it finish at chance accuracy. `where` prefixes the
// message (e.g. the worker's rank).
constexpr double kDivergedLoss = 1e4;
Status CheckLoss(double loss, int64_t step, const std::string& where);

}  // namespace frugal::train
