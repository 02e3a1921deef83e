// Pieces of a training loop shared by the single-worker Trainer and the
// distributed engine: data on tensors, batches, evaluation, optimiser and
// schedule construction from TrainOptions. Uses LibTorch.
#pragma once

#include <memory>
#include <vector>

#include <torch/torch.h>

#include "frugal/common/status.h"
#include "frugal/data/dataset.h"
#include "frugal/models/model.h"
#include "frugal/train/lr_schedule.h"
#include "frugal/train/trainer.h"

namespace frugal::train {

// A dataset and a zero-copy tensor view of it.
struct TensorDataset {
  std::shared_ptr<const data::Dataset> storage;
  torch::Tensor images;  // [N, C, H, W] float, views storage->images
  torch::Tensor labels;  // [N] int64, views storage->labels
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

TensorDataset ToTensorDataset(data::Dataset ds);

struct Batch {
  torch::Tensor x;
  torch::Tensor y;
};

// Gathers `indices` into one batch on `device`.
Batch MakeBatch(const TensorDataset& ds, const std::vector<int64_t>& indices, const torch::Device& device);

// Fraction of `ds` classified correctly (model in eval mode, no grad).
// Leaves the model in eval mode.
double EvaluateAccuracy(torch::nn::Module& model, const TensorDataset& ds, const torch::Device& device);

// LibTorch's dense optimiser for options.optimizer.
Result<std::unique_ptr<torch::optim::Optimizer>> MakeTorchOptimizer(const TrainOptions& options,
                                                                    std::vector<torch::Tensor> params);

LrScheduleOptions ScheduleOptions(const TrainOptions& options, int64_t total_steps);

}  // namespace frugal::train
