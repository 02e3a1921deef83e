// Throughput and convergence models backed by the Pollux artifact traces
// (data/scheduler/pollux-traces/<app>/). Internal to src/sched; callers use
// LoadPolluxTraces() from throughput_model.h.
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "frugal/sched/throughput_model.h"

namespace frugal::sched {

// One measured point: per-GPU batch and the step/sync times at it.
struct StepSample {
  double local_bsz;
  double step_time;
  double sync_time;
};

// Step time from placements.csv (exact shapes, interpolated in local batch)
// and, for shapes it does not cover, from scalability.csv plus the per-
// (nodes, replicas) means of placements.csv, interpolated over
// (num_nodes, num_replicas, local_bsz).
class PolluxThroughputModel : public ThroughputModel {
 public:
  // `exact`: shape key (sorted per-node counts as digits) -> samples sorted by
  // local batch. `spread`: nodes -> replicas -> samples sorted by local batch.
  PolluxThroughputModel(std::unordered_map<std::string, std::vector<StepSample>> exact,
                        std::map<int, std::map<int, std::vector<StepSample>>> spread,
                        int min_local_bsz, int max_local_bsz);

  double StepTime(const Shape& shape, int global_batch) const override;
  int MaxGpus(int global_batch) const override;

  // Seconds per step (compute + sync) of one micro-step of `local_bsz` per GPU
  // on `shape`, and the sync part of it.
  StepSample Lookup(const Shape& shape, double local_bsz) const;

 private:
  std::unordered_map<std::string, std::vector<StepSample>> exact_;
  std::map<int, std::map<int, std::vector<StepSample>>> spread_;
  int min_local_bsz_;
  int max_local_bsz_;
};

// Progress per epoch and per-step gain from validation-<B>.csv files.
class PolluxConvergenceModel : public ConvergenceModel {
 public:
  struct EpochStats {
    double grad_sqr;
    double grad_var;
  };
  // `epoch_end[e]`: progress needed by the end of epoch e+1. `stats`: batch
  // size -> per-epoch gradient statistics. `base_batch`: B0.
  PolluxConvergenceModel(std::vector<double> epoch_end, std::map<int, std::vector<EpochStats>> stats,
                         int base_batch);

  int NumEpochs() const override { return static_cast<int>(epoch_end_.size()); }
  double EpochEnd(int epoch) const override;
  double StepGain(int global_batch, int epoch) const override;
  int MinBatch() const override { return stats_.begin()->first; }
  int MaxBatch() const override { return stats_.rbegin()->first; }

 private:
  std::vector<double> epoch_end_;
  std::map<int, std::vector<EpochStats>> stats_;
  int base_batch_;
};

// Interpolates linearly in local_bsz; clamps outside the measured range.
// REQUIRES: samples non-empty and sorted by local_bsz.
StepSample InterpolateLocal(const std::vector<StepSample>& samples, double local_bsz);

}  // namespace frugal::sched
