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

// The shuffled sample order of `epoch` (docs/design/data.md has the algorithm).
std::vector<int64_t> ShuffledOrder(int64_t num_samples, uint64_t seed, int64_t epoch);

// Per-worker batch sizes adding up to `global` over `world` workers, as
// even as possible: the first global % world workers take one more sample.
// InvalidArgument when global < world (a worker would have no sample) or
// world < 1.
Result<std::vector<int64_t>> SplitGlobalBatch(int64_t global, int world);

class BatchPlan {
 public:
  // REQUIRES: num_samples >= 0, every batch size > 0.
  static Result<BatchPlan> Create(int64_t num_samples, std::vector<int64_t> batch_sizes,
                                  uint64_t seed, bool drop_last);

  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int world_size() const { return static_cast<int>(batch_sizes_.size()); }
  int64_t global_batch() const { return global_batch_; }

  // The shuffled order of one epoch (all workers'). Computed once per epoch;
  // see docs/design/data.md for the exact algorithm (Python baselines reproduce it).
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

// BatchCursor: the same data order as BatchPlan, but the workers' batch
// sizes may change between steps (the controller rebalances them). A step
// consumes the next sum(batch_sizes) samples of the epoch's order; when the
// next global batch no longer fits, the epoch ends (drop_last) and the next
// epoch's order starts. With fixed sizes it yields exactly BatchPlan's
// slices. Every worker holds an identical cursor and applies the same size
// changes at the same step.
//
// Thread safety: not thread-safe.
class BatchCursor {
 public:
  // REQUIRES: every batch size > 0, their sum <= num_samples.
  static Result<BatchCursor> Create(int64_t num_samples, uint64_t seed, std::vector<int64_t> batch_sizes);

  // From the current step on. Same requirements as Create.
  Status SetBatchSizes(std::vector<int64_t> batch_sizes);
  const std::vector<int64_t>& batch_sizes() const { return batch_sizes_; }
  int64_t global_batch() const { return global_batch_; }

  int64_t epoch() const { return epoch_; }
  int64_t step_in_epoch() const { return step_in_epoch_; }
  // Samples of the current epoch consumed before the current step.
  int64_t position() const { return position_; }

  // Indices of `rank` at the current step. REQUIRES: 0 <= rank < world.
  std::vector<int64_t> Slice(int rank) const;
  // Moves to the next step, starting a new epoch when needed.
  void Advance();
  // Moves to a saved position (epoch, step_in_epoch, position), e.g. a
  // checkpoint's. The position counts samples, so a run resumed with other
  // batch sizes (or another world size) neither skips nor repeats a sample
  // of the epoch. Where the rest of the epoch is shorter than the current
  // global batch, it is dropped (as Advance drops a partial batch) and the
  // cursor is at the start of the next epoch. InvalidArgument for a
  // position beyond the epoch, or a batch larger than the data set.
  Status Seek(int64_t epoch, int64_t step_in_epoch, int64_t position);

 private:
  BatchCursor() = default;

  int64_t num_samples_ = 0;
  uint64_t seed_ = 0;
  std::vector<int64_t> batch_sizes_;
  int64_t global_batch_ = 0;
  int64_t epoch_ = 0;
  int64_t step_in_epoch_ = 0;
  int64_t position_ = 0;
  std::vector<int64_t> order_;
};

}  // namespace frugal::data
