// `frugal train`: binds every TrainOptions field to a flag (and TOML key) and
// runs frugal::train::Trainer.
#include <cstdio>

#include "commands.h"
#include "frugal/train/trainer.h"

namespace frugal::cli {

namespace {

struct TrainFlags {
  train::TrainOptions options;
};

void BindTrainOptions(CLI::App* cmd, train::TrainOptions& o) {
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("--model", o.model, "Model: mlp, cnn or resnet18")->group("Model and data");
  cmd->add_option("--dataset", o.dataset, "Dataset: fashion-mnist or synthetic")->group("Model and data");
  cmd->add_option("--data-dir", o.data_dir, "Directory of the Fashion-MNIST idx files")->group("Model and data");
  cmd->add_option("--synthetic-train-size", o.synthetic_train_size, "Training samples of the synthetic dataset")->group("Model and data");
  cmd->add_option("--synthetic-test-size", o.synthetic_test_size, "Test samples of the synthetic dataset")->group("Model and data");

  cmd->add_option("--epochs", o.epochs, "Passes over the training set")->group("Schedule");
  cmd->add_option("--max-steps", o.max_steps, "Stop after this many steps (0 = no limit)")->group("Schedule");
  cmd->add_option("--batch-size", o.batch_size, "Samples per step per worker")->group("Schedule");

  cmd->add_option("--optimizer", o.optimizer, "sgd, adam or adamw")->group("Optimizer");
  cmd->add_option("--lr", o.lr, "Peak learning rate")->group("Optimizer");
  cmd->add_option("--momentum", o.momentum, "SGD momentum")->group("Optimizer");
  cmd->add_option("--dampening", o.dampening, "SGD dampening")->group("Optimizer");
  cmd->add_flag("--nesterov,!--no-nesterov", o.nesterov, "SGD Nesterov momentum")->group("Optimizer");
  cmd->add_option("--weight-decay", o.weight_decay, "L2 (sgd, adam) or decoupled (adamw) weight decay")->group("Optimizer");
  cmd->add_option("--beta1", o.beta1, "Adam beta1")->group("Optimizer");
  cmd->add_option("--beta2", o.beta2, "Adam beta2")->group("Optimizer");
  cmd->add_option("--eps", o.eps, "Adam epsilon")->group("Optimizer");
  cmd->add_option("--lr-schedule", o.lr_schedule, "constant, cosine or step (after warm-up)")->group("Optimizer");
  cmd->add_option("--warmup-steps", o.warmup_steps, "Linear learning-rate warm-up steps")->group("Optimizer");
  cmd->add_option("--lr-step-size", o.lr_step_size, "Steps between decays of the step schedule")->group("Optimizer");
  cmd->add_option("--lr-gamma", o.lr_gamma, "Decay factor of the step schedule")->group("Optimizer");

  cmd->add_option("--eval-every", o.eval_every, "Evaluate every N steps (0 = every epoch)")->group("Output");
  cmd->add_option("--log-every", o.log_every, "Progress/metrics cadence in steps")->group("Output");
  cmd->add_option("--runs-dir", o.runs_dir, "Where runs/<run-name>/metrics.jsonl goes")->group("Output");
  cmd->add_option("--run-name", o.run_name, "Run name (default: <model>-<date>-<time>)")->group("Output");
  cmd->add_flag("--quiet", o.quiet, "No progress output")->group("Output");

  cmd->add_option("--seed", o.seed, "Seed for weights and data order")->group("Execution");
  cmd->add_option("--threads", o.threads, "LibTorch threads (0 = all cores)")->group("Execution");
  cmd->add_option("--device", o.device, "LibTorch device: cpu, cuda, cuda:N")->group("Execution");
}

}  // namespace

void AddTrainCommand(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* cmd = app.add_subcommand("train", "Train a model (default: mlp on Fashion-MNIST)");
  AddConfigOption(cmd);
  BindTrainOptions(cmd, flags->options);
  cmd->callback([cmd, flags] {
    if (ApplyConfigAndMaybePrint(cmd)) return;
    ThrowIfError(flags->options.Validate());
    auto trainer = train::Trainer::Create(flags->options);
    ThrowIfError(trainer.status());
    auto result = (*trainer)->Run();
    ThrowIfError(result.status());
    std::printf("done: %lld steps, %lld epochs, test accuracy %.2f%%, %.1f s, %.0f samples/s\n",
                static_cast<long long>(result->steps), static_cast<long long>(result->epochs_completed),
                100.0 * result->final_test_accuracy, result->wall_time_s, result->samples_per_s);
    std::printf("metrics: %s\n", result->metrics_path.c_str());
  });
}

}  // namespace frugal::cli
