// Evaluation split across the ranks of a world (Note [Sharded evaluation]).
#pragma once

#include <chrono>
#include <utility>

#include <torch/torch.h>

#include "frugal/comm/transport/transport.h"
#include "frugal/common/status.h"
#include "frugal/train/training_data.h"

namespace frugal::engine {

// Examples [begin, end) of a dataset of `size` that rank `rank` of `world`
// evaluates: contiguous, sizes differ by at most one.
std::pair<int64_t, int64_t> EvalShard(int64_t size, int rank, int world);

// Every rank evaluates its shard of `ds` and all-gathers the sums under `tag`
// (each rank's wait bounded by `timeout`); every rank returns the evaluation
// of the whole dataset. REQUIRES: the ranks' models are identical.
Result<train::Evaluation> EvaluateSharded(comm::Transport& transport, comm::Tag tag,
                                          std::chrono::milliseconds timeout, torch::nn::Module& model,
                                          const train::TensorDataset& ds, const torch::Device& device);

}  // namespace frugal::engine
