// The field list of TrainOptions (see common/field_list.h): key, help
// section, help text, scope and range of every option of the training loop.
// The CLI, TOML, Python keywords, validation and the cross-worker digest are
// generated from it.
#pragma once

#include "frugal/common/field_list.h"
#include "frugal/train/trainer.h"

namespace frugal::train {

// Upper bounds that keep a typo from exhausting memory or time; the message
// says why.
inline constexpr double kMaxSyntheticSamples = 1e6;  // x 784 floats = 3 GB

template <class V>
void VisitFields(TrainOptions& o, V&& visit) {
  const char* md = "Model and data";
  visit(Field("model", md, "Model: mlp, cnn, resnet18 or gpt-tiny"), o.model);
  visit(Field("dataset", md, "Dataset: fashion-mnist, synthetic or text (gpt-tiny)"), o.dataset);
  visit(Field("data_dir", md, "Directory of the Fashion-MNIST idx files").SpeedNeutral().PerWorker().NonEmpty(), o.data_dir);
  visit(Field("text_file", md, "Text corpus of --dataset text: bible-kjv-text's data file or plain text")
            .PerWorker().NonEmpty(),
        o.text_file);
  visit(Field("synthetic_train_size", md, "Training samples of the synthetic dataset").SpeedNeutral()
            .Min(1).Max(kMaxSyntheticSamples, "the synthetic set is held in memory"),
        o.synthetic_train_size);
  visit(Field("synthetic_test_size", md, "Test samples of the synthetic dataset").SpeedNeutral()
            .PerWorker().Min(1).Max(kMaxSyntheticSamples, "the synthetic set is held in memory"),
        o.synthetic_test_size);

  const char* sc = "Schedule";
  visit(Field("epochs", sc, "Passes over the training set").SpeedNeutral().Min(1).Max(1e6), o.epochs);
  visit(Field("max_steps", sc, "Stop after this many steps (0 = no limit)").SpeedNeutral().NonNegative(), o.max_steps);
  visit(Field("batch_size", sc, "Samples per step per worker").Min(1).Max(1 << 20), o.batch_size);
  visit(Field("global_batch", sc,
              "Samples per step over all workers, split evenly and kept when the world changes size "
              "(0 = batch-size on every worker)")
            .NonNegative().Max(1 << 26, "a step's samples are held in memory"),
        o.global_batch);

  const char* op = "Optimizer";
  visit(Field("optimizer", op, "sgd, adam or adamw"), o.optimizer);
  visit(Field("lr", op, "Peak learning rate").SpeedNeutral().Positive(), o.lr);
  visit(Field("momentum", op, "SGD momentum").SpeedNeutral().UnitInterval(), o.momentum);
  visit(Field("dampening", op, "SGD dampening").SpeedNeutral().Min(0).Max(1), o.dampening);
  visit(Field("nesterov", op, "SGD Nesterov momentum").SpeedNeutral(), o.nesterov);
  visit(Field("weight_decay", op, "L2 (sgd, adam) or decoupled (adamw) weight decay").SpeedNeutral().NonNegative(), o.weight_decay);
  visit(Field("beta1", op, "Adam beta1").UnitInterval(), o.beta1);
  visit(Field("beta2", op, "Adam beta2").UnitInterval(), o.beta2);
  visit(Field("eps", op, "Adam epsilon").SpeedNeutral().Positive(), o.eps);
  visit(Field("lr_schedule", op, "constant, cosine or step (after warm-up)").SpeedNeutral(), o.lr_schedule);
  visit(Field("warmup_steps", op, "Linear learning-rate warm-up steps").SpeedNeutral().NonNegative(), o.warmup_steps);
  visit(Field("lr_step_size", op, "Steps between decays of the step schedule").SpeedNeutral().Min(1), o.lr_step_size);
  visit(Field("lr_gamma", op, "Decay factor of the step schedule").SpeedNeutral().Positive(), o.lr_gamma);

  const char* out = "Output";
  visit(Field("eval_every", out, "Evaluate every N steps (0 = every epoch)").SpeedNeutral().NonNegative(), o.eval_every);
  visit(Field("log_every", out, "Progress/metrics cadence in steps").SpeedNeutral().PerWorker().Min(1), o.log_every);
  visit(Field("runs_dir", out, "Where runs/<run-name>/metrics.jsonl goes").PerWorker().NonEmpty(), o.runs_dir);
  visit(Field("run_name", out, "Run name (default: <model>-<date>-<time>)").PerWorker(), o.run_name);
  visit(Field("quiet", out, "No progress output").SpeedNeutral().PerWorker(), o.quiet);

  const char* ex = "Execution";
  visit(Field("seed", ex, "Seed for weights and data order").SpeedNeutral(), o.seed);
  visit(Field("threads", ex, "LibTorch threads (0 = all cores)").PerWorker().NonNegative().Max(1024), o.threads);
  visit(Field("device", ex, "LibTorch device: cpu, cuda, cuda:N").PerWorker().NonEmpty(), o.device);
}

}  // namespace frugal::train
