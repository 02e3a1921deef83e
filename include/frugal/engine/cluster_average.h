// ClusterAverage: the members of one cluster average their gradients every
// step, so that a cluster trains as one replica (--sync site, Note [Site
// replicas] in sync_strategy.cc). Only this rank's cluster takes part: no
// message crosses to another cluster.
//
// Every member sends its gradients, as fp32 or bf16 values, to every other
// member and sums the members' values as sent (its own rounded as the
// others see them) in rank order, so the mean is bit-identical on every
// member whatever the order the messages arrive in. A cluster of n sends
// (n - 1) copies of the gradients per member and step: meant for the
// cluster's fast links and the few members of a box or a rack.
//
// Thread safety: one thread calls it. Lifetime: the transport and the
// tensors outlive it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "frugal/comm/transport/transport.h"
#include "frugal/common/status.h"
#include "frugal/compress/value_codes.h"

namespace frugal::engine {

class ClusterAverage {
 public:
  // params: the model's tensors, in the same order on every member.
  // REQUIRES: values is kFp32 or kBf16 (DistributedOptions::site_values).
  ClusterAverage(comm::Transport* transport, std::vector<torch::Tensor> params, std::chrono::milliseconds timeout,
                 compress::ValueEncoding values = compress::ValueEncoding::kFp32);

  // Members of this rank's cluster, itself included.
  int members() const { return static_cast<int>(members_.size()); }

  // Replaces each parameter's gradient by the mean over the cluster's members
  // of their gradients of iteration t (a parameter without a gradient counts
  // as zero and gets one). With one member it does nothing. Errors: a member
  // that times out or closes, or one whose gradients have another size
  // (named, with its rank).
  Status Average(int64_t t);

 private:
  comm::Transport* const transport_;
  std::vector<torch::Tensor> params_;
  const std::chrono::milliseconds timeout_;
  const bool bf16_;
  std::vector<int> members_;  // of this rank's cluster, increasing
  int64_t numel_ = 0;
  std::vector<float> sum_;
  // The last step's message, reused once the transport has let go of it.
  std::shared_ptr<comm::Bytes> send_;
};

}  // namespace frugal::engine
