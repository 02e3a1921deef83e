// BatchPlan: which samples each worker trains on at each step of an epoch.
//
// Every epoch the sample indices are shuffled with a generator seeded by
// (seed, epoch), so all workers derive the same order without talking. Step s
// of the epoch consumes the next global batch of B = sum(batch_sizes) samples
// from that order; worker r takes the slice after workers 0..r-1's slices.
// So W workers with batch b see, at each step, exactly the samples a single
// worker with batch W*b would see: the basis of the engine's exactness test.
// Worker batch sizes may differ (heterogeneous workers).
//
// With drop_last (the default for training) a final partial global batch is
// skipped; without it the remainder is split across workers in proportion to
// their batch sizes, so every sample is used exactly once per epoch.
//
// Thread safety: immutable after construction.
#pragma once

#include <cstdint>
#include <vector>

#include "frugal/common/status.h"

namespace frugal::data {

class BatchPlan {
 public:
  // REQUIRES: num_samples >= 0, every batch size > 0.
  static Result<BatchPlan> Create(int64_t num_samples, std::vector<int64_t> batch_sizes,
                                  uint64_t seed, bool drop_last);

  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int world_size() const { return static_cast<int>(batch_sizes_.size()); }
  int64_t global_batch() const { return global_batch_; }

  // The shuffled order of one epoch (all workers'). Computed once per epoch;
  // see docs/data.md for the exact algorithm (Python baselines reproduce it).
  std::vector<int64_t> EpochOrder(int64_t epoch) const;

  // Sample indices for `rank` at `step`, given the epoch's order. May be
  // empty only for the final partial batch when drop_last is false.
  // REQUIRES: 0 <= step < steps_per_epoch(), 0 <= rank < world_size(),
  //           epoch_order came from EpochOrder().
  std::vector<int64_t> Slice(const std::vector<int64_t>& epoch_order, int64_t step, int rank) const;

 private:
  BatchPlan() = default;

  int64_t num_samples_ = 0;
  std::vector<int64_t> batch_sizes_;
  int64_t global_batch_ = 0;
  uint64_t seed_ = 0;
  bool drop_last_ = true;
  int64_t steps_per_epoch_ = 0;
};

}  // namespace frugal::data
