#include "sharded_eval.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "frugal/comm/algorithms/collectives.h"

namespace frugal::engine {

// Note [Sharded evaluation]
// Evaluation used to run on rank 0 alone while the other ranks went on into
// the next iteration and waited there for rank 0's gradients: on a loaded
// machine a long evaluation (cnn's 10,000 test images at load 25) outlasted
// the exchange timeout and failed the run. Now every rank evaluates a
// contiguous 1/W of the test set between the same two gates; the sums
// (correct predictions, predictions, summed loss) are all-gathered and added
// in rank order, so every rank gets the same figures, and the accuracy is
// exactly the one-rank result (a count). The replicas are identical at an
// evaluation gate (after the batch-norm average), so the shards see one
// model. Evaluation takes 1/W of the time it took, and no rank waits on
// another's evaluation for longer than its own share.

std::pair<int64_t, int64_t> EvalShard(int64_t size, int rank, int world) {
  const int64_t base = size / world, extra = size % world;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

namespace {

constexpr size_t kSumsBytes = 24;

comm::Bytes SumsBytes(const train::EvaluationSums& s) {
  comm::Bytes out(kSumsBytes);
  std::memcpy(out.data(), &s.correct, 8);
  std::memcpy(out.data() + 8, &s.predictions, 8);
  std::memcpy(out.data() + 16, &s.loss_sum, 8);
  return out;
}

Result<train::EvaluationSums> ParseSums(const comm::Bytes& b, size_t rank) {
  train::EvaluationSums s;
  if (b.size() != kSumsBytes) {
    return Status::Corruption("evaluation sums of rank " + std::to_string(rank) + " have " +
                              std::to_string(b.size()) + " bytes, expected 24");
  }
  std::memcpy(&s.correct, b.data(), 8);
  std::memcpy(&s.predictions, b.data() + 8, 8);
  std::memcpy(&s.loss_sum, b.data() + 16, 8);
  if (s.correct < 0 || s.predictions < s.correct || !std::isfinite(s.loss_sum)) {
    return Status::Corruption("evaluation sums of rank " + std::to_string(rank) + " are out of range");
  }
  return s;
}

}  // namespace

Result<train::Evaluation> EvaluateSharded(comm::Transport& transport, comm::Tag tag,
                                          std::chrono::milliseconds timeout, torch::nn::Module& model,
                                          const train::TensorDataset& ds, const torch::Device& device) {
  const bool text = ds.storage && ds.storage->is_text();
  const auto [begin, end] = EvalShard(ds.size, transport.rank(), transport.world_size());
  const train::EvaluationSums mine = train::EvaluateRange(model, ds, device, begin, end);
  if (transport.world_size() == 1) return train::FromSums(mine, text);
  auto all = comm::AllGather(transport, tag, SumsBytes(mine), timeout);
  if (!all.ok()) return all.status().WithContext("gathering the evaluation of every rank's share of the test set");
  train::EvaluationSums total;
  for (size_t r = 0; r < all->size(); ++r) {
    FRUGAL_ASSIGN_OR_RETURN(train::EvaluationSums s, ParseSums((*all)[r], r));
    total += s;
  }
  return train::FromSums(total, text);
}

}  // namespace frugal::engine
