// LiveSpeed: a running job's SpeedEstimate for the policy, learned from the
// samples/s its metrics.jsonl reports at each worker count (an exponential
// moving average per count). Progress is counted in training samples.
//
// Note [Live throughput prior]: at a worker count not measured yet, the rate
// is the nearest measured count's, scaled by (n / m)^0.8 (data parallelism
// on one host scales sub-linearly; 0.8 is a prior, corrected as soon as the
// job has run at n). A job with no measurement at all answers n^0.8 samples/s,
// a unit-free prior that only orders shapes; afs-p treats such a job as new
// (progress 0) and gives it the prior of PolicyOptions::afsp_prior_seconds.
// The planner (src/sim) is not consulted: it has no model of a CPU-slot
// `frugal train` job yet.
//
// Thread safety: none; the manager guards it.
#pragma once

#include <cmath>
#include <cstdlib>
#include <map>

#include "frugal/sched/policy.h"

namespace frugal::cluster {

class LiveSpeed final : public sched::SpeedEstimate {
 public:
  static constexpr double kExponent = 0.8;
  static constexpr double kSmoothing = 0.3;  // Weight of a new sample in the moving average.

  void Observe(int workers, double samples_per_s) {
    if (workers <= 0 || !(samples_per_s > 0) || !std::isfinite(samples_per_s)) return;
    auto it = measured_.find(workers);
    if (it == measured_.end()) {
      measured_[workers] = samples_per_s;
    } else {
      it->second += kSmoothing * (samples_per_s - it->second);
    }
  }

  double ProgressRate(const sched::Shape& shape) const override {
    int n = 0;
    for (int g : shape) n += g;
    return RateAt(n);
  }

  double RateAt(int n) const {
    if (n <= 0) return 0;
    if (measured_.empty()) return std::pow(n, kExponent);
    auto exact = measured_.find(n);
    if (exact != measured_.end()) return exact->second;
    int best = measured_.begin()->first;
    for (const auto& [m, rate] : measured_) {
      if (std::abs(std::log(static_cast<double>(m) / n)) < std::abs(std::log(static_cast<double>(best) / n))) best = m;
    }
    return measured_.at(best) * std::pow(static_cast<double>(n) / best, kExponent);
  }

  const std::map<int, double>& measured() const { return measured_; }

 private:
  std::map<int, double> measured_;
};

}  // namespace frugal::cluster
