#include "frugal/train/training_data.h"

#include <cmath>
#include <string>
#include <utility>

#include "frugal/data/text_corpus.h"

namespace frugal::train {

TensorDataset ToTensorDataset(data::Dataset ds) {
  TensorDataset out;
  auto storage = std::make_shared<data::Dataset>(std::move(ds));
  if (storage->is_text()) {
    // Windows of T bytes at stride T; the targets are the same view shifted by one byte.
    const int64_t n = storage->size, t = storage->sequence_length;
    out.images = torch::from_blob(storage->tokens.data(), {n, t}, torch::kUInt8);
    out.labels = torch::from_blob(storage->tokens.data() + 1, {n, t}, torch::kUInt8);
  } else {
    out.images = torch::from_blob(storage->images.data(),
                                  {storage->size, storage->channels, storage->height, storage->width},
                                  torch::kFloat32);
    out.labels = torch::from_blob(storage->labels.data(), {storage->size}, torch::kInt64);
  }
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
  if (options.dataset == DatasetKind::kText) {
    // One read and decode of the corpus for both splits.
    FRUGAL_ASSIGN_OR_RETURN(std::string text, data::ReadTextCorpus(options.text_file));
    const int64_t context = models::SequenceLength(options.model);
    for (auto [split, dest] : {std::pair{data::Split::kTrain, &out.train}, std::pair{data::Split::kTest, &out.test}}) {
      Result<data::Dataset> ds = data::MakeTextDataset(text, split, context);
      if (!ds.ok()) return ds.status().WithContext(options.text_file);
      *dest = ToTensorDataset(std::move(*ds));
    }
    return out;
  }
  FRUGAL_ASSIGN_OR_RETURN(data::Dataset train, data::LoadFashionMnist(options.data_dir, data::Split::kTrain));
  FRUGAL_ASSIGN_OR_RETURN(data::Dataset test, data::LoadFashionMnist(options.data_dir, data::Split::kTest));
  out.train = ToTensorDataset(std::move(train));
  out.test = ToTensorDataset(std::move(test));
  return out;
}

void MoveToDevice(TrainingData* data, const torch::Device& device) {
  if (device.is_cpu()) return;
  for (TensorDataset* ds : {&data->train, &data->test}) {
    ds->images = ds->images.to(device);
    ds->labels = ds->labels.to(device);
  }
}

Batch MakeBatch(const TensorDataset& ds, const std::vector<int64_t>& indices, const torch::Device& device) {
  torch::Tensor idx = torch::from_blob(const_cast<int64_t*>(indices.data()),
                                       {static_cast<int64_t>(indices.size())}, torch::kInt64);
  if (!ds.images.device().is_cpu()) idx = idx.to(ds.images.device());
  Batch b;
  b.x = ds.images.index_select(0, idx).to(device);
  b.y = ds.labels.index_select(0, idx).to(device);
  if (b.x.scalar_type() == torch::kUInt8) {  // text: byte ids
    b.x = b.x.to(torch::kLong);
    b.y = b.y.to(torch::kLong);
  }
  return b;
}

double Evaluation::bits_per_char() const { return loss / std::log(2.0); }

nlohmann::json Evaluation::Fields() const {
  if (!text) return nlohmann::json::object();
  return {{"val_loss", loss}, {"bits_per_char", bits_per_char()}};
}

EvaluationSums& EvaluationSums::operator+=(const EvaluationSums& o) {
  correct += o.correct;
  predictions += o.predictions;
  loss_sum += o.loss_sum;
  return *this;
}

EvaluationSums EvaluateRange(torch::nn::Module& model, const TensorDataset& ds, const torch::Device& device,
                             int64_t first, int64_t last) {
  torch::NoGradGuard no_grad;
  model.eval();
  auto* classifier = dynamic_cast<models::Model*>(&model);
  const bool text = ds.storage && ds.storage->is_text();
  // Text batches are small: attention holds batch x heads x T x T scores per layer.
  const int64_t eval_batch = text ? 64 : 1000;
  EvaluationSums sums;
  for (int64_t begin = first; begin < last; begin += eval_batch) {
    const int64_t end = std::min(last, begin + eval_batch);
    std::vector<int64_t> idx(static_cast<size_t>(end - begin));
    for (int64_t i = begin; i < end; ++i) idx[static_cast<size_t>(i - begin)] = i;
    const Batch b = MakeBatch(ds, idx, device);
    torch::Tensor logits = classifier->forward(b.x);
    sums.correct += logits.argmax(1).eq(b.y).sum().item<int64_t>();
    sums.predictions += b.y.numel();
    sums.loss_sum += torch::nn::functional::cross_entropy(
                         logits, b.y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                         .item<double>();
  }
  return sums;
}

Evaluation FromSums(const EvaluationSums& sums, bool text) {
  Evaluation e;
  e.text = text;
  if (sums.predictions > 0) {
    e.accuracy = static_cast<double>(sums.correct) / static_cast<double>(sums.predictions);
    e.loss = sums.loss_sum / static_cast<double>(sums.predictions);
  }
  return e;
}

Evaluation EvaluateModel(torch::nn::Module& model, const TensorDataset& ds, const torch::Device& device) {
  model.eval();  // also for an empty dataset
  return FromSums(EvaluateRange(model, ds, device, 0, ds.size), ds.storage && ds.storage->is_text());
}

double EvaluateAccuracy(torch::nn::Module& model, const TensorDataset& ds, const torch::Device& device) {
  return EvaluateModel(model, ds, device).accuracy;
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
