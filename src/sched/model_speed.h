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

  double StepTime(const Shape& shape) const {
    if (shape.empty()) return std::numeric_limits<double>::infinity();
    std::string key(reinterpret_cast<const char*>(shape.data()), shape.size() * sizeof(int));
    auto it = step_cache_.find(key);
    if (it != step_cache_.end()) return it->second;
    double t = app_->throughput().StepTime(shape, batch_);
    step_cache_.emplace(std::move(key), t);
    return t;
  }
  double RateAt(const Shape& shape, int epoch) const {
    double t = StepTime(shape);
    if (!(t > 0) || !std::isfinite(t)) return 0;
    const ConvergenceModel& c = app_->convergence();
    return c.StepGain(batch_, std::min(epoch, c.NumEpochs() - 1)) / t;
  }
  double ProgressRate(const Shape& shape) const override { return RateAt(shape, epoch_); }

 private:
  const Application* app_;
  int batch_;
  int epoch_ = 0;
  mutable std::unordered_map<std::string, double> step_cache_;
};

}  // namespace frugal::sched
