#include "frugal/data/batch_plan.h"

#include <numeric>
#include <utility>

#include "frugal/common/random.h"

namespace frugal::data {

Result<std::vector<int64_t>> SplitGlobalBatch(int64_t global, int world) {
  if (world < 1) return Status::InvalidArgument("no workers");
  if (global < world) {
    return Status::InvalidArgument("a global batch of " + std::to_string(global) + " cannot be split over " +
                                   std::to_string(world) + " workers: every worker needs at least one sample");
  }
  std::vector<int64_t> sizes(static_cast<size_t>(world), global / world);
  for (int64_t r = 0; r < global % world; ++r) ++sizes[static_cast<size_t>(r)];
  return sizes;
}

Result<BatchPlan> BatchPlan::Create(int64_t num_samples, std::vector<int64_t> batch_sizes,
                                    uint64_t seed, bool drop_last) {
  if (num_samples < 0) return Status::InvalidArgument("negative number of samples");
  if (batch_sizes.empty()) return Status::InvalidArgument("no workers");
  for (int64_t b : batch_sizes) {
    if (b <= 0) return Status::InvalidArgument("batch size must be positive, got " + std::to_string(b));
  }
  BatchPlan plan;
  plan.num_samples_ = num_samples;
  plan.global_batch_ = std::accumulate(batch_sizes.begin(), batch_sizes.end(), int64_t{0});
  plan.batch_sizes_ = std::move(batch_sizes);
  plan.seed_ = seed;
  plan.drop_last_ = drop_last;
  plan.steps_per_epoch_ = drop_last ? num_samples / plan.global_batch_
                                    : (num_samples + plan.global_batch_ - 1) / plan.global_batch_;
  if (plan.steps_per_epoch_ == 0) {
    return Status::InvalidArgument("global batch " + std::to_string(plan.global_batch_) +
                                   " is larger than the dataset (" + std::to_string(num_samples) +
                                   " samples)");
  }
  return plan;
}

std::vector<int64_t> ShuffledOrder(int64_t num_samples, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(num_samples);
  std::iota(order.begin(), order.end(), int64_t{0});
  // Fisher-Yates from the back, seeded per epoch (see docs/design/data.md).
  SplitMix64 rng(seed * 1000003ULL + static_cast<uint64_t>(epoch));
  for (int64_t i = num_samples - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

std::vector<int64_t> BatchPlan::EpochOrder(int64_t epoch) const { return ShuffledOrder(num_samples_, seed_, epoch); }

std::vector<int64_t> BatchPlan::Slice(const std::vector<int64_t>& epoch_order, int64_t step,
                                      int rank) const {
  int64_t begin = step * global_batch_;
  int64_t available = std::min(global_batch_, num_samples_ - begin);
  // Offsets of each rank inside this global batch. A full batch uses the
  // configured sizes; a final partial one splits `available` in proportion.
  int64_t offset = 0;
  int64_t count = 0;
  if (available == global_batch_) {
    for (int r = 0; r < rank; ++r) offset += batch_sizes_[r];
    count = batch_sizes_[rank];
  } else {
    // Cumulative proportional split: rank r ends at floor(available * cum_r / B).
    int64_t cum_before = 0;
    for (int r = 0; r < rank; ++r) cum_before += batch_sizes_[r];
    int64_t cum_after = cum_before + batch_sizes_[rank];
    offset = available * cum_before / global_batch_;
    count = available * cum_after / global_batch_ - offset;
  }
  return std::vector<int64_t>(epoch_order.begin() + begin + offset,
                              epoch_order.begin() + begin + offset + count);
}

namespace {

Status CheckBatchSizes(const std::vector<int64_t>& sizes, int64_t num_samples, int64_t* global) {
  if (sizes.empty()) return Status::InvalidArgument("no workers");
  *global = 0;
  for (int64_t b : sizes) {
    if (b <= 0) return Status::InvalidArgument("batch size must be positive, got " + std::to_string(b));
    *global += b;
  }
  if (*global > num_samples) {
    return Status::InvalidArgument("global batch " + std::to_string(*global) + " is larger than the dataset (" +
                                   std::to_string(num_samples) + " samples)");
  }
  return Status::Ok();
}

}  // namespace

Result<BatchCursor> BatchCursor::Create(int64_t num_samples, uint64_t seed, std::vector<int64_t> batch_sizes) {
  BatchCursor c;
  c.num_samples_ = num_samples;
  c.seed_ = seed;
  FRUGAL_RETURN_IF_ERROR(CheckBatchSizes(batch_sizes, num_samples, &c.global_batch_));
  c.batch_sizes_ = std::move(batch_sizes);
  c.order_ = ShuffledOrder(num_samples, seed, 0);
  return c;
}

Status BatchCursor::SetBatchSizes(std::vector<int64_t> batch_sizes) {
  int64_t global = 0;
  FRUGAL_RETURN_IF_ERROR(CheckBatchSizes(batch_sizes, num_samples_, &global));
  if (batch_sizes.size() != batch_sizes_.size()) return Status::InvalidArgument("the number of workers changed");
  batch_sizes_ = std::move(batch_sizes);
  global_batch_ = global;
  if (position_ + global_batch_ > num_samples_) {  // the new batch no longer fits this epoch
    ++epoch_;
    step_in_epoch_ = 0;
    position_ = 0;
    order_ = ShuffledOrder(num_samples_, seed_, epoch_);
  }
  return Status::Ok();
}

std::vector<int64_t> BatchCursor::Slice(int rank) const {
  int64_t offset = position_;
  for (int r = 0; r < rank; ++r) offset += batch_sizes_[r];
  return std::vector<int64_t>(order_.begin() + offset, order_.begin() + offset + batch_sizes_[rank]);
}

void BatchCursor::Advance() {
  position_ += global_batch_;
  ++step_in_epoch_;
  if (position_ + global_batch_ > num_samples_) {
    ++epoch_;
    step_in_epoch_ = 0;
    position_ = 0;
    order_ = ShuffledOrder(num_samples_, seed_, epoch_);
  }
}

Status BatchCursor::Seek(int64_t epoch, int64_t step_in_epoch, int64_t position) {
  if (epoch >= 0 && step_in_epoch >= 0 && position >= 0 && position <= num_samples_ &&
      position + global_batch_ > num_samples_) {
    // The rest of the epoch is shorter than this (larger) global batch: it
    // is dropped, as Advance drops an epoch's last partial batch, and the
    // next epoch begins. A run resumed with more workers near an epoch's end
    // lands here.
    epoch += 1;
    step_in_epoch = 0;
    position = 0;
  }
  if (epoch < 0 || step_in_epoch < 0 || position < 0 || position + global_batch_ > num_samples_) {
    return Status::InvalidArgument("data position (epoch " + std::to_string(epoch) + ", sample " +
                                   std::to_string(position) + ") does not fit a global batch of " +
                                   std::to_string(global_batch_) + " in " + std::to_string(num_samples_) + " samples");
  }
  if (epoch != epoch_) order_ = ShuffledOrder(num_samples_, seed_, epoch);
  epoch_ = epoch;
  step_in_epoch_ = step_in_epoch;
  position_ = position;
  return Status::Ok();
}

}  // namespace frugal::data
