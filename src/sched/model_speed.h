// The simulator's SpeedEstimate: answers a policy's "how fast would this job
// run on shape S" from the application's models. Internal to src/sched.
#pragma once

#include <cmath>
#include <limits>
#include <string>
#include <algorithm>
#include <unordered_map>

#include "frugal/sched/policy.h"
#include "frugal/sched/throughput_model.h"

namespace frugal::sched {

// Answers a policy's "how fast would this job run on shape S" from the
// application's models at the job's fixed batch and current epoch. Step times
// are cached per shape (they do not depend on the epoch).
class ModelSpeed : public SpeedEstimate {
 public:
  ModelSpeed(const Application* app, int batch) : app_(app), batch_(batch) {}

  void set_epoch(int epoch) { epoch_ = epoch; }
  void set_batch(int batch) { batch_ = batch; }
  int batch() const { return batch_; }

  double StepTime(const Shape& shape, int batch) const {
    if (shape.empty()) return std::numeric_limits<double>::infinity();
    std::string key(reinterpret_cast<const char*>(shape.data()), shape.size() * sizeof(int));
    key.append(reinterpret_cast<const char*>(&batch), sizeof(batch));
    auto it = step_cache_.find(key);
    if (it != step_cache_.end()) return it->second;
    double t = app_->throughput().StepTime(shape, batch);
    step_cache_.emplace(std::move(key), t);
    return t;
  }
  double RateAt(const Shape& shape, int epoch, int batch) const {
    int gpus = 0;
    for (int g : shape) gpus += g;
    if (gpus > app_->throughput().MaxGpus(batch)) return 0;  // Per-GPU batch below the minimum.
    double t = StepTime(shape, batch);
    if (!(t > 0) || !std::isfinite(t)) return 0;
    const ConvergenceModel& c = app_->convergence();
    return c.StepGain(batch, std::min(epoch, c.NumEpochs() - 1)) / t;
  }
  double RateAt(const Shape& shape, int epoch) const { return RateAt(shape, epoch, batch_); }
  double ProgressRate(const Shape& shape) const override { return RateAt(shape, epoch_, batch_); }
  double ProgressRateAt(const Shape& shape, int batch) const override { return RateAt(shape, epoch_, batch); }

 private:
  const Application* app_;
  int batch_;
  int epoch_ = 0;
  // Step time by (shape, batch): policies ask for the same few shapes every round.
  mutable std::unordered_map<std::string, double> step_cache_;
};

}  // namespace frugal::sched
