// frugal::Trainer: trains one model on one worker. The `frugal train` command
// and (later) the Python binding are thin layers over it. This header is
// torch-free (pimpl), so callers compile fast.
//
// Thread safety: a Trainer is used from one thread; several may coexist.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frugal/common/clock.h"
#include "frugal/common/enum_names.h"
#include "frugal/common/status.h"
#include "frugal/train/lr_schedule.h"

namespace frugal::train {

enum class DatasetKind { kFashionMnist, kSynthetic, kText };
enum class OptimizerKind { kSgd, kAdam, kAdamW };

// The options of the training loop itself (model, data, schedule,
// optimizer, output, execution), each default written once here. The
// distributed engine adds its own (engine::RunConfig). The front ends (CLI
// flags, TOML, Python keywords), validation and the cross-worker digest are
// all generated from the one field list in engine/run_config.h.
struct TrainOptions {
  // Model and data.
  std::string model = "mlp";                                    // a zoo name: mlp | cnn | resnet18 | gpt-tiny
  DatasetKind dataset = DatasetKind::kFashionMnist;             // text: for gpt-tiny (byte-level corpus)
  std::string data_dir = "/usr/share/datasets/fashion-mnist";   // idx files, gzipped or not
  std::string text_file = "/usr/lib/bible.data";                // dataset = text: bible-kjv-text's file, or plain text
  int64_t synthetic_train_size = 4096;                          // samples, dataset = synthetic
  int64_t synthetic_test_size = 1024;
  // Schedule.
  int64_t epochs = 3;
  int64_t max_steps = 0;         // stop after this many steps; 0 = no limit
  int64_t batch_size = 64;       // per worker
  // Samples per step over all workers, split as evenly as possible
  // (data::SplitGlobalBatch); 0 = batch_size on every worker. Unlike
  // batch_size it survives a change of world size (elastic generations,
  // resuming with another world size): the steps per epoch and the
  // learning-rate schedule stay the same.
  int64_t global_batch = 0;
  // Optimiser.
  OptimizerKind optimizer = OptimizerKind::kSgd;
  double lr = 0.05;
  double momentum = 0.9;         // sgd
  double dampening = 0.0;        // sgd
  bool nesterov = false;         // sgd
  double weight_decay = 0.0;     // sgd/adam: L2 added to the gradient; adamw: decoupled
  double beta1 = 0.9;            // adam, adamw
  double beta2 = 0.999;
  double eps = 1e-8;
  // Learning-rate schedule (see lr_schedule.h).
  LrScheduleKind lr_schedule = LrScheduleKind::kCosine;
  int64_t warmup_steps = 100;
  int64_t lr_step_size = 1000;         // step schedule
  double lr_gamma = 0.1;               // step schedule
  // Evaluation and logging.
  int64_t eval_every = 0;   // evaluate every N steps; 0 = at the end of every epoch
  int64_t log_every = 50;   // progress line cadence when stdout is not a terminal
  std::string runs_dir = "runs";
  std::string run_name;     // empty = "<model>-<YYYYmmdd-HHMMSS>"
  // Execution.
  uint64_t seed = 1;
  int threads = 0;          // LibTorch intra-op threads; 0 = all cores
  std::string device = "cpu";  // any torch::Device string: cpu, cuda, cuda:1, ...
  bool quiet = false;       // no progress output (metrics are still written)

  // Checks what the field list cannot: that the model exists, the device
  // parses, the schedule is consistent. The message names the option.
  Status Validate() const;
};

struct TrainResult {
  int64_t steps = 0;
  int64_t epochs_completed = 0;
  double final_test_accuracy = 0;  // on the whole test set (text: next-byte accuracy)
  double final_val_loss = -1;      // text: validation loss (nats per byte) of the last evaluation; else -1
  double final_loss = 0;           // mean training loss of the last logged window
  double wall_time_s = 0;
  double samples_per_s = 0;
  std::string metrics_path;        // runs/<run-name>/metrics.jsonl
};

class Trainer {
 public:
  // Loads the data and builds the model. Errors: bad options, missing or
  // corrupt data files, unknown device. `clock` (not owned, outlives the
  // Trainer; nullptr: Env::Default()) times the run and its metrics.
  static Result<std::unique_ptr<Trainer>> Create(const TrainOptions& options, Clock* clock = nullptr);
  ~Trainer();

  // Trains to completion. A NaN/Inf loss is an error, not a silent result.
  Result<TrainResult> Run();

  // Test-set accuracy of the current parameters.
  Result<double> Evaluate();

  // Flat copy of all trainable parameters, in model->parameters() order.
  std::vector<float> Parameters() const;

  class Impl;

 private:
  explicit Trainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace frugal::train

template <>
struct frugal::EnumNames<frugal::train::DatasetKind> {
  static constexpr std::pair<train::DatasetKind, const char*> kTable[] = {
      {train::DatasetKind::kFashionMnist, "fashion-mnist"},
      {train::DatasetKind::kSynthetic, "synthetic"},
      {train::DatasetKind::kText, "text"}};
};
template <>
struct frugal::EnumNames<frugal::train::OptimizerKind> {
  static constexpr std::pair<train::OptimizerKind, const char*> kTable[] = {
      {train::OptimizerKind::kSgd, "sgd"}, {train::OptimizerKind::kAdam, "adam"}, {train::OptimizerKind::kAdamW, "adamw"}};
};
