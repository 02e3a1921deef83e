#include "frugal/train/trainer.h"

#include <cmath>
#include <ctime>
#include <filesystem>

#include <torch/torch.h>

#include "frugal/common/env.h"
#include "frugal/common/jsonl_writer.h"
#include "frugal/data/batch_plan.h"
#include "frugal/models/model.h"
#include "frugal/train/run_reporter.h"
#include "frugal/train/train_fields.h"
#include "frugal/train/training_data.h"

namespace frugal::train {

// Ranges, finiteness and bounds of every number come from the field list
// (train_fields.h); the rest are the checks that need the zoo, the device
// parser or several fields at once.
Status TrainOptions::Validate() const {
  Status range;
  VisitFields(const_cast<TrainOptions&>(*this), [&](const Field& f, const auto& value) {
    if (range.ok()) range = CheckField(f, value);
  });
  FRUGAL_RETURN_IF_ERROR(range);
  if (run_name.find('/') != std::string::npos || run_name == "." || run_name == "..") {
    return Status::InvalidArgument("--run-name '" + run_name + "' must be a plain name (no '/'): runs go to " +
                                   runs_dir + "/<run-name>");
  }
  bool known_model = false;
  std::string names;
  for (const auto& n : models::ModelNames()) {
    known_model = known_model || n == model;
    names += (names.empty() ? "" : ", ") + n;
  }
  if (!known_model) return Status::InvalidArgument("--model: unknown model '" + model + "' (known: " + names + ")");
  const bool language_model = models::SequenceLength(model) > 0;
  if (language_model != (dataset == DatasetKind::kText)) {
    return Status::InvalidArgument(language_model ? "--model " + model + " needs --dataset text"
                                                  : std::string("--dataset text needs a language model (gpt-tiny)"));
  }
  if (nesterov && (momentum <= 0 || dampening != 0)) {
    return Status::InvalidArgument("--nesterov needs --momentum > 0 and --dampening 0");
  }
  if (optimizer != OptimizerKind::kSgd && (beta1 < 0 || beta1 >= 1 || beta2 < 0 || beta2 >= 1)) {
    return Status::InvalidArgument("--beta1/--beta2 must be in [0, 1)");
  }
  Result<LrSchedule> sched = LrSchedule::Create(ScheduleOptions(*this, 1));
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
  std::unique_ptr<RunReporter> reporter;
  Clock* clock = nullptr;  // not owned
  int64_t total_steps = 0;

  Result<TrainResult> Run();
  void SetLearningRate(double lr);
};

namespace {

// One process trains on the whole global batch.
int64_t BatchOf(const TrainOptions& o) { return o.global_batch > 0 ? o.global_batch : o.batch_size; }

std::string DefaultRunName(const std::string& model) {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", std::localtime(&now));
  return model + "-" + buf;
}

}  // namespace

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;

Result<std::unique_ptr<Trainer>> Trainer::Create(const TrainOptions& options, Clock* clock) {
  FRUGAL_RETURN_IF_ERROR(options.Validate());
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->clock = clock != nullptr ? clock : &Env::Default();
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
    MoveToDevice(&impl->data, impl->device);
    FRUGAL_ASSIGN_OR_RETURN(impl->optimizer, MakeTorchOptimizer(options, impl->model->parameters()));

    FRUGAL_ASSIGN_OR_RETURN(data::BatchPlan plan,
                            data::BatchPlan::Create(impl->data.train.size, {BatchOf(options)}, options.seed, true));
    impl->plan = std::make_unique<data::BatchPlan>(std::move(plan));
    impl->total_steps = options.epochs * impl->plan->steps_per_epoch();
    if (options.max_steps > 0) impl->total_steps = std::min(impl->total_steps, options.max_steps);

    FRUGAL_ASSIGN_OR_RETURN(LrSchedule sched, LrSchedule::Create(ScheduleOptions(options, impl->total_steps)));
    impl->schedule = std::make_unique<LrSchedule>(sched);

    std::string run_name = options.run_name.empty() ? DefaultRunName(options.model) : options.run_name;
    std::string path = (std::filesystem::path(options.runs_dir) / run_name / "metrics.jsonl").string();
    RunReporterOptions ro;
    ro.metrics_path = path;
    ro.log_every = options.log_every;
    ro.total_steps = impl->total_steps;
    ro.quiet = options.quiet;
    ro.clock = impl->clock;
    FRUGAL_ASSIGN_OR_RETURN(impl->reporter, RunReporter::Create(ro));
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
    if (options.optimizer == OptimizerKind::kSgd) {
      static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
    } else if (options.optimizer == OptimizerKind::kAdam) {
      static_cast<torch::optim::AdamOptions&>(group.options()).lr(lr);
    } else {
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    }
  }
}

Result<TrainResult> Trainer::Impl::Run() {
  RunReporter& report = *reporter;
  TrainResult result;
  result.metrics_path = report.metrics_path();
  if (!options.quiet) {
    std::printf("frugal train: model %s (%lld parameters), %s: %lld train / %lld test samples, %lld steps, device %s\n",
                options.model.c_str(), static_cast<long long>(models::CountParameters(*model)),
                data.train.name.c_str(), static_cast<long long>(data.train.size),
                static_cast<long long>(data.test.size), static_cast<long long>(total_steps),
                device.str().c_str());
    std::printf("metrics: %s\n", report.metrics_path().c_str());
  }

  int64_t step = 0;
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
      report.AddStep(loss_value, static_cast<double>(batch.x.size(0)), 0.0);

      bool end_of_epoch = (s + 1 == plan->steps_per_epoch()) || step == total_steps;
      bool evaluate = options.eval_every > 0 ? (step % options.eval_every == 0 || step == total_steps) : end_of_epoch;
      bool log = report.WindowDue(step) || evaluate;
      nlohmann::json extra = nlohmann::json::object();
      if (evaluate) {
        const Clock::time_point started = clock->Now();
        const Evaluation eval = EvaluateModel(*model, data.test, device);
        model->train();
        report.ExcludeFromTrainTime(Seconds(clock->Now() - started));
        FRUGAL_RETURN_IF_ERROR(report.Evaluated(step, epoch, eval.accuracy, /*record=*/false));
        extra = eval.Fields();
        extra["test_accuracy"] = eval.accuracy;
        result.final_val_loss = eval.text ? eval.loss : -1;
      }
      if (log) {
        FRUGAL_RETURN_IF_ERROR(report.CloseWindow(step, epoch, schedule->At(step - 1), extra));
        result.final_loss = report.last_loss();
      } else {
        report.Redraw(step, epoch);
      }
    }
    result.epochs_completed = epoch + 1;
  }
  report.Finish();
  result.steps = step;
  result.final_test_accuracy = report.last_accuracy();
  result.wall_time_s = report.Elapsed();
  result.samples_per_s = static_cast<double>(step * BatchOf(options)) / result.wall_time_s;
  return result;
}

}  // namespace frugal::train
