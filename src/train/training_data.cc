#include "frugal/train/training_data.h"

#include <cmath>
#include <string>

namespace frugal::train {

TensorDataset ToTensorDataset(data::Dataset ds) {
  TensorDataset out;
  auto storage = std::make_shared<data::Dataset>(std::move(ds));
  out.images = torch::from_blob(storage->images.data(),
                                {storage->size, storage->channels, storage->height, storage->width},
                                torch::kFloat32);
  out.labels = torch::from_blob(storage->labels.data(), {storage->size}, torch::kInt64);
  out.name = storage->name;
  out.size = storage->size;
  out.num_classes = storage->num_classes;
  out.storage = std::move(storage);
  return out;
}

Result<TrainingData> LoadTrainingData(const TrainOptions& options) {
  TrainingData out;
  if (options.dataset == DatasetKind::kSynthetic) {
    out.train = ToTensorDataset(data::MakeSynthetic(options.synthetic_train_size, options.seed));
    out.test = ToTensorDataset(data::MakeSynthetic(options.synthetic_test_size, options.seed + 7919));
    return out;
  }
  FRUGAL_ASSIGN_OR_RETURN(data::Dataset train, data::LoadFashionMnist(options.data_dir, data::Split::kTrain));
  FRUGAL_ASSIGN_OR_RETURN(data::Dataset test, data::LoadFashionMnist(options.data_dir, data::Split::kTest));
  out.train = ToTensorDataset(std::move(train));
  out.test = ToTensorDataset(std::move(test));
  return out;
}

Batch MakeBatch(const TensorDataset& ds, const std::vector<int64_t>& indices, const torch::Device& device) {
  torch::Tensor idx = torch::from_blob(const_cast<int64_t*>(indices.data()),
                                       {static_cast<int64_t>(indices.size())}, torch::kInt64);
  Batch b;
  b.x = ds.images.index_select(0, idx).to(device);
  b.y = ds.labels.index_select(0, idx).to(device);
  return b;
}

double EvaluateAccuracy(torch::nn::Module& model, const TensorDataset& ds, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  model.eval();
  auto* classifier = dynamic_cast<models::Model*>(&model);
  constexpr int64_t kEvalBatch = 1000;
  int64_t correct = 0;
  for (int64_t begin = 0; begin < ds.size; begin += kEvalBatch) {
    int64_t end = std::min(ds.size, begin + kEvalBatch);
    torch::Tensor x = ds.images.slice(0, begin, end).to(device);
    torch::Tensor y = ds.labels.slice(0, begin, end).to(device);
    torch::Tensor pred = classifier->forward(x).argmax(1);
    correct += pred.eq(y).sum().item<int64_t>();
  }
  return ds.size > 0 ? static_cast<double>(correct) / static_cast<double>(ds.size) : 0.0;
}

Result<std::unique_ptr<torch::optim::Optimizer>> MakeTorchOptimizer(const TrainOptions& o,
                                                                    std::vector<torch::Tensor> params) {
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (o.optimizer == OptimizerKind::kSgd) {
    opt = std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).dampening(o.dampening).nesterov(o.nesterov).weight_decay(o.weight_decay));
  } else if (o.optimizer == OptimizerKind::kAdam) {
    opt = std::make_unique<torch::optim::Adam>(
        params, torch::optim::AdamOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
  } else if (o.optimizer == OptimizerKind::kAdamW) {
    opt = std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
  } else {
    return Status::InvalidArgument(std::string("unknown optimizer '") + NameOf(o.optimizer) + "'");
  }
  return opt;
}

LrScheduleOptions ScheduleOptions(const TrainOptions& o, int64_t total_steps) {
  LrScheduleOptions s;
  s.base_lr = o.lr;
  s.kind = o.lr_schedule;
  s.warmup_steps = o.warmup_steps;
  s.total_steps = total_steps;
  s.step_size = o.lr_step_size;
  s.gamma = o.lr_gamma;
  return s;
}

Status CheckLoss(double loss, int64_t step, const std::string& where) {
  if (std::isfinite(loss) && loss <= kDivergedLoss) return Status::Ok();
  return Status::Internal("training diverged" + (where.empty() ? std::string() : " on " + where) + ": loss is " +
                          std::to_string(loss) + " at step " + std::to_string(step) +
                          " (try a smaller --lr or --momentum)");
}

}  // namespace frugal::train
