// LiveSpeed: a running job's SpeedEstimate for the policy, learned from the
// samples/s its metrics.jsonl reports at each worker count (an exponential
// moving average per count). Progress is counted in training samples.
//
// Note [Live throughput prior]: the rate at n workers comes from, in order:
//   1. the job's own measurement at n;
//   2. its own measurement at the nearest count m it ran at, times the
//      expected speed-up from m to n (below);
//   3. what the jobs of its profile (JobSubmission::profile: same model,
//      batch and options; the server's ProfileRates) measured at n, or at
//      their nearest count times the expected speed-up;
//   4. the prior's prediction at n (SpeedPrior: a command job's own
//      planned rates, from frugal.plan on the user's machine; else the
//      planner, when the server runs with one), times the cluster's
//      calibration of it
//      (Note [Prior calibration] in cluster_manager.cc);
//   5. n^0.8, a unit-free prior that only orders shapes.
// The expected speed-up from m to n is the profile's own ratio when the
// profile measured both counts, else the prior's ratio, else (n / m)^0.8
// (data parallelism on one host scales sub-linearly; corrected as soon as
// the job has run at n). Own measurements come first because a job's speed
// also depends on what shares its host, which the profile's pooled rates
// average over. A job with no measurement of its own has made no progress,
// and afs-p gives it the prior of PolicyOptions::afsp_prior_seconds whatever
// its rates; the rates still decide how much it gains from each worker.
// Measured (docs/design/scheduler.md, "Live workload on two slots"): without the
// profile, afs-p grew a lone mlp job to 2 slots on which mlp runs no faster;
// the other mlp jobs had measured it.
//
// Thread safety: none; the manager guards it, and a round works on copies.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <utility>

#include "frugal/cluster/speed_prior.h"
#include "frugal/sched/policy.h"

namespace frugal::cluster {

// Rates (samples/s) by worker count, each an exponential moving average.
class RateTable {
 public:
  static constexpr double kSmoothing = 0.3;  // Weight of a new sample in the moving average.

  // False (and nothing changes) for a count or rate that is not positive and finite.
  bool Observe(int workers, double samples_per_s) {
    if (workers <= 0 || !(samples_per_s > 0) || !std::isfinite(samples_per_s)) return false;
    auto [it, inserted] = rates_.emplace(workers, samples_per_s);
    if (!inserted) it->second += kSmoothing * (samples_per_s - it->second);
    return true;
  }
  void Set(int workers, double samples_per_s) { rates_[workers] = samples_per_s; }
  bool empty() const { return rates_.empty(); }
  bool Has(int workers) const { return rates_.count(workers) > 0; }
  double At(int workers) const { return rates_.at(workers); }
  // The measured count closest to n in ratio (the smaller one on a tie). REQUIRES !empty().
  int Nearest(int n) const {
    int best = rates_.begin()->first;
    for (const auto& [m, rate] : rates_) {
      if (std::abs(std::log(static_cast<double>(m) / n)) < std::abs(std::log(static_cast<double>(best) / n))) best = m;
    }
    return best;
  }
  const std::map<int, double>& rates() const { return rates_; }

 private:
  std::map<int, double> rates_;
};

class LiveSpeed final : public sched::SpeedEstimate {
 public:
  static constexpr double kExponent = 0.8;

  void Observe(int workers, double samples_per_s) { own_.Observe(workers, samples_per_s); }
  // What the jobs of this job's profile measured (a copy: rounds run off the lock).
  void SetShared(RateTable shared) { shared_ = std::move(shared); }
  void SetPrior(std::shared_ptr<const SpeedPrior> prior) { prior_ = std::move(prior); }
  // What the prior's predictions are multiplied by (measured / predicted on this cluster).
  void SetPriorScale(double scale) { prior_scale_ = scale > 0 && std::isfinite(scale) ? scale : 1; }
  // The prior's own prediction at n, uncalibrated; 0 when there is none.
  double PredictedAt(int n) const {
    if (prior_ == nullptr || n <= 0) return 0;
    const double r = prior_->SamplesPerSecond(n);
    return r > 0 && std::isfinite(r) ? r : 0;
  }

  // Slots each worker takes (JobSubmission::GpusPerWorker): a shape of
  // slots runs the whole workers that fit on each of its nodes.
  void SetGpusPerWorker(int gpus) { gpus_per_worker_ = std::max(1, gpus); }

  double ProgressRate(const sched::Shape& shape) const override {
    int n = 0;
    for (int slots : shape) n += slots / gpus_per_worker_;
    return RateAt(n);
  }

  double RateAt(int n) const {
    if (n <= 0) return 0;
    for (const RateTable* t : {&own_, &shared_}) {
      if (t->Has(n)) return t->At(n);
      if (!t->empty()) {
        const int m = t->Nearest(n);
        return t->At(m) * SpeedUp(m, n);
      }
    }
    const double predicted = PriorAt(n);
    return predicted > 0 ? predicted : std::pow(n, kExponent);
  }

  const std::map<int, double>& measured() const { return own_.rates(); }

 private:
  // Expected rate(n) / rate(m).
  double SpeedUp(int m, int n) const {
    if (shared_.Has(m) && shared_.Has(n)) return shared_.At(n) / shared_.At(m);
    const double at_m = PriorAt(m), at_n = PriorAt(n);
    if (at_m > 0 && at_n > 0 && std::isfinite(at_m) && std::isfinite(at_n)) return at_n / at_m;
    return std::pow(static_cast<double>(n) / m, kExponent);
  }
  double PriorAt(int n) const { return PredictedAt(n) * prior_scale_; }

  RateTable own_;
  RateTable shared_;
  std::shared_ptr<const SpeedPrior> prior_;
  double prior_scale_ = 1;
  int gpus_per_worker_ = 1;
};

}  // namespace frugal::cluster
