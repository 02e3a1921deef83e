#include "frugal/train/trainer.h"

#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>

#include <torch/torch.h>

#include "frugal/common/jsonl_writer.h"
#include "frugal/data/batch_plan.h"
#include "frugal/models/model.h"
#include "frugal/train/progress.h"
#include "frugal/train/training_data.h"

namespace frugal::train {

Status TrainOptions::Validate() const {
  bool known_model = false;
  for (const auto& n : models::ModelNames()) known_model = known_model || n == model;
  if (!known_model) return Status::InvalidArgument("--model: unknown model '" + model + "' (known: mlp, cnn, resnet18)");
  if (dataset != "fashion-mnist" && dataset != "synthetic") {
    return Status::InvalidArgument("--dataset: unknown dataset '" + dataset + "' (known: fashion-mnist, synthetic)");
  }
  if (epochs <= 0) return Status::InvalidArgument("--epochs must be > 0, got " + std::to_string(epochs));
  if (max_steps < 0) return Status::InvalidArgument("--max-steps must be >= 0");
  if (batch_size <= 0) return Status::InvalidArgument("--batch-size must be > 0, got " + std::to_string(batch_size));
  if (synthetic_train_size <= 0 || synthetic_test_size <= 0) return Status::InvalidArgument("synthetic sizes must be > 0");
  if (optimizer != "sgd" && optimizer != "adam" && optimizer != "adamw") {
    return Status::InvalidArgument("--optimizer: unknown optimizer '" + optimizer + "' (known: sgd, adam, adamw)");
  }
  if (!(lr > 0) || !std::isfinite(lr)) return Status::InvalidArgument("--lr must be a positive number");
  if (momentum < 0 || momentum >= 1) return Status::InvalidArgument("--momentum must be in [0, 1)");
  if (nesterov && (momentum <= 0 || dampening != 0)) {
    return Status::InvalidArgument("--nesterov needs --momentum > 0 and --dampening 0");
  }
  if (weight_decay < 0) return Status::InvalidArgument("--weight-decay must be >= 0");
  if (beta1 < 0 || beta1 >= 1 || beta2 < 0 || beta2 >= 1) return Status::InvalidArgument("--beta1/--beta2 must be in [0, 1)");
  if (!(eps > 0)) return Status::InvalidArgument("--eps must be > 0");
  if (eval_every < 0) return Status::InvalidArgument("--eval-every must be >= 0");
  if (log_every <= 0) return Status::InvalidArgument("--log-every must be > 0");
  if (threads < 0) return Status::InvalidArgument("--threads must be >= 0");
  if (workers < 1) return Status::InvalidArgument("--workers must be >= 1");
  if (!(density > 0) || density > 1) return Status::InvalidArgument("--density must be in (0, 1]");
  if (sparsifier != "block" && sparsifier != "topk" && sparsifier != "randomk") {
    return Status::InvalidArgument("--sparsifier: unknown sparsifier '" + sparsifier + "' (known: block, topk, randomk)");
  }
  if (value_encoding != "fp32" && value_encoding != "fp16" && value_encoding != "bf16") {
    return Status::InvalidArgument("--value-encoding must be fp32, fp16 or bf16");
  }
  if (staleness != 0 && staleness != 1) return Status::InvalidArgument("--staleness must be 0 or 1");
  if (!(bucket_mb > 0)) return Status::InvalidArgument("--bucket-mb must be > 0");
  if (cpu_threads < 1) return Status::InvalidArgument("--cpu-threads must be >= 1");
  if (exchange != "auto" && exchange != "flat" && exchange != "hierarchical") {
    return Status::InvalidArgument("--exchange must be auto, flat or hierarchical");
  }
  if (!(timeout_s > 0)) return Status::InvalidArgument("--timeout-s must be > 0");
  if (checksum_every < 0) return Status::InvalidArgument("--checksum-every must be >= 0");
  if (dgc_momentum < 0 || dgc_momentum >= 1) return Status::InvalidArgument("--dgc-momentum must be in [0, 1)");
  if (cluster.empty()) return Status::InvalidArgument("--cluster must not be empty");
  if (adapt != "on" && adapt != "off" && adapt != "batch") {
    return Status::InvalidArgument("--adapt must be on, batch or off");
  }
  if (decide_every <= 0) return Status::InvalidArgument("--decide-every must be > 0");
  if (!(compute_slowdown >= 1.0)) return Status::InvalidArgument("--compute-slowdown must be >= 1");
  LrScheduleOptions lro;
  lro.base_lr = lr;
  lro.kind = lr_schedule;
  lro.warmup_steps = warmup_steps;
  lro.step_size = lr_step_size;
  lro.gamma = lr_gamma;
  Result<LrSchedule> sched = LrSchedule::Create(lro);
  if (!sched.ok()) return sched.status().WithContext("--lr-schedule");
  try {
    torch::Device d(device);
    (void)d;
  } catch (const c10::Error&) {
    return Status::InvalidArgument("--device: '" + device + "' is not a device (try cpu or cuda:0)");
  }
  return Status::Ok();
}

class Trainer::Impl {
 public:
  TrainOptions options;
  torch::Device device{torch::kCPU};
  TrainingData data;
  std::shared_ptr<models::Model> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<data::BatchPlan> plan;
  std::unique_ptr<LrSchedule> schedule;
  std::unique_ptr<JsonlWriter> metrics;
  int64_t total_steps = 0;

  Result<TrainResult> Run();
  void SetLearningRate(double lr);
};

namespace {

std::string DefaultRunName(const std::string& model) {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", std::localtime(&now));
  return model + "-" + buf;
}

}  // namespace

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;

Result<std::unique_ptr<Trainer>> Trainer::Create(const TrainOptions& options) {
  FRUGAL_RETURN_IF_ERROR(options.Validate());
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  try {
    impl->device = torch::Device(options.device);
    if (impl->device.is_cuda() && !torch::cuda::is_available()) {
      return Status::InvalidArgument("--device " + options.device + ": CUDA is not available on this machine");
    }
    if (options.threads > 0) torch::set_num_threads(options.threads);
    torch::manual_seed(options.seed);

    FRUGAL_ASSIGN_OR_RETURN(impl->data, LoadTrainingData(options));
    FRUGAL_ASSIGN_OR_RETURN(impl->model, models::CreateModel(options.model, impl->data.train.num_classes));
    impl->model->to(impl->device);
    FRUGAL_ASSIGN_OR_RETURN(impl->optimizer, MakeTorchOptimizer(options, impl->model->parameters()));

    FRUGAL_ASSIGN_OR_RETURN(data::BatchPlan plan,
                            data::BatchPlan::Create(impl->data.train.size, {options.batch_size}, options.seed, true));
    impl->plan = std::make_unique<data::BatchPlan>(std::move(plan));
    impl->total_steps = options.epochs * impl->plan->steps_per_epoch();
    if (options.max_steps > 0) impl->total_steps = std::min(impl->total_steps, options.max_steps);

    FRUGAL_ASSIGN_OR_RETURN(LrSchedule sched, LrSchedule::Create(ScheduleOptions(options, impl->total_steps)));
    impl->schedule = std::make_unique<LrSchedule>(sched);

    std::string run_name = options.run_name.empty() ? DefaultRunName(options.model) : options.run_name;
    std::string path = (std::filesystem::path(options.runs_dir) / run_name / "metrics.jsonl").string();
    FRUGAL_ASSIGN_OR_RETURN(impl->metrics, JsonlWriter::Open(path, /*truncate=*/true));
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("libtorch: ") + e.what_without_backtrace());
  }
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

Result<TrainResult> Trainer::Run() {
  try {
    return impl_->Run();
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("libtorch: ") + e.what_without_backtrace());
  }
}

Result<double> Trainer::Evaluate() {
  try {
    return EvaluateAccuracy(*impl_->model, impl_->data.test, impl_->device);
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("libtorch: ") + e.what_without_backtrace());
  }
}

std::vector<float> Trainer::Parameters() const {
  std::vector<float> out;
  for (const auto& p : impl_->model->parameters()) {
    torch::Tensor c = p.detach().to(torch::kCPU).contiguous();
    out.insert(out.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }
  return out;
}

void Trainer::Impl::SetLearningRate(double lr) {
  for (auto& group : optimizer->param_groups()) {
    if (options.optimizer == "sgd") {
      static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
    } else if (options.optimizer == "adam") {
      static_cast<torch::optim::AdamOptions&>(group.options()).lr(lr);
    } else {
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    }
  }
}

Result<TrainResult> Trainer::Impl::Run() {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };

  ProgressReporter progress(stdout, options.log_every, options.quiet ? 0 : -1);
  TrainResult result;
  result.metrics_path = metrics->path();
  if (!options.quiet) {
    std::printf("frugal train: model %s (%lld parameters), %s: %lld train / %lld test samples, %lld steps, device %s\n",
                options.model.c_str(), static_cast<long long>(models::CountParameters(*model)),
                data.train.name.c_str(), static_cast<long long>(data.train.size),
                static_cast<long long>(data.test.size), static_cast<long long>(total_steps),
                device.str().c_str());
    std::printf("metrics: %s\n", metrics->path().c_str());
  }

  int64_t step = 0;
  double window_loss = 0;
  int64_t window_steps = 0;
  int64_t window_samples = 0;
  double window_start = 0;
  double last_accuracy = -1;

  for (int64_t epoch = 0; step < total_steps; ++epoch) {
    std::vector<int64_t> order = plan->EpochOrder(epoch);
    model->train();
    for (int64_t s = 0; s < plan->steps_per_epoch() && step < total_steps; ++s) {
      SetLearningRate(schedule->At(step));
      Batch batch = MakeBatch(data.train, plan->Slice(order, s, 0), device);
      optimizer->zero_grad();
      torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(batch.x), batch.y);
      loss.backward();
      double loss_value = loss.item<double>();
      FRUGAL_RETURN_IF_ERROR(CheckLoss(loss_value, step, ""));
      optimizer->step();
      ++step;
      window_loss += loss_value;
      ++window_steps;
      window_samples += batch.x.size(0);

      bool end_of_epoch = (s + 1 == plan->steps_per_epoch()) || step == total_steps;
      bool evaluate = options.eval_every > 0 ? (step % options.eval_every == 0 || step == total_steps) : end_of_epoch;
      bool log = step % options.log_every == 0 || evaluate || step == total_steps;

      ProgressState ps;
      ps.step = step;
      ps.total_steps = total_steps;
      ps.epoch = epoch;
      ps.loss = window_loss / std::max<int64_t>(1, window_steps);
      ps.elapsed_s = elapsed();
      ps.samples_per_s = window_samples / std::max(1e-9, ps.elapsed_s - window_start);
      ps.test_accuracy = last_accuracy;
      if (evaluate) {
        last_accuracy = EvaluateAccuracy(*model, data.test, device);
        model->train();
        ps.test_accuracy = last_accuracy;
        ps.elapsed_s = elapsed();
        if (!options.quiet) progress.Evaluated(ps);
      }
      if (!options.quiet) progress.Update(ps);
      if (log) {
        nlohmann::json rec = {{"wall_time_s", ps.elapsed_s}, {"step", step},         {"epoch", epoch},
                              {"loss", ps.loss},             {"lr", schedule->At(step - 1)},
                              {"samples_per_s", ps.samples_per_s}};
        if (evaluate) rec["test_accuracy"] = last_accuracy;
        FRUGAL_RETURN_IF_ERROR(metrics->Write(rec));
        result.final_loss = ps.loss;
        window_loss = 0;
        window_steps = 0;
        window_samples = 0;
        window_start = elapsed();
      }
    }
    result.epochs_completed = epoch + 1;
  }
  if (!options.quiet) progress.Finish();
  result.steps = step;
  result.final_test_accuracy = last_accuracy;
  result.wall_time_s = elapsed();
  result.samples_per_s = static_cast<double>(step * options.batch_size) / result.wall_time_s;
  return result;
}

}  // namespace frugal::train
