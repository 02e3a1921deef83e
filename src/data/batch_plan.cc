#include "frugal/data/batch_plan.h"

#include <numeric>
#include <utility>

#include "frugal/common/random.h"

namespace frugal::data {

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

std::vector<int64_t> BatchPlan::EpochOrder(int64_t epoch) const {
  std::vector<int64_t> order(num_samples_);
  std::iota(order.begin(), order.end(), int64_t{0});
  // Fisher-Yates from the back, seeded per epoch (see docs/data.md).
  SplitMix64 rng(seed_ * 1000003ULL + static_cast<uint64_t>(epoch));
  for (int64_t i = num_samples_ - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

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

}  // namespace frugal::data
