// Throughput from a plain table of (GPUs -> samples/s) and a convergence model
// with perfect statistical efficiency. Internal; callers use
// LoadThroughputTable() from throughput_model.h.
#pragma once

#include <utility>
#include <vector>

#include "frugal/sched/throughput_model.h"

namespace frugal::sched {

class TableThroughputModel : public ThroughputModel {
 public:
  // `points`: (num_gpus, samples_per_s) sorted by num_gpus, non-empty.
  explicit TableThroughputModel(std::vector<std::pair<int, double>> points);

  // global_batch / samples_per_s(total GPUs); the node spread is ignored.
  double StepTime(const Shape& shape, int global_batch) const override;
  // One sample per GPU at least.
  int MaxGpus(int global_batch) const override { return global_batch; }
  double SamplesPerSecond(int gpus) const;

 private:
  std::vector<std::pair<int, double>> points_;
};

// Progress counted in samples: one epoch of `total_samples`, each step adds
// its global batch.
class SampleCountConvergence : public ConvergenceModel {
 public:
  explicit SampleCountConvergence(double total_samples) : total_(total_samples) {}
  int NumEpochs() const override { return 1; }
  double EpochEnd(int epoch) const override { return epoch <= 0 ? 0 : total_; }
  double StepGain(int global_batch, int epoch) const override { return global_batch; }

 private:
  double total_;
};

}  // namespace frugal::sched
