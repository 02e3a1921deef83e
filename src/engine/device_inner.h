// DeviceInner: the local mode's inner optimizer stepping the model's own
// tensors on their device (Note [Inner steps on the device] in
// device_inner.cc). Internal to the engine; LocalSync owns one when its
// inner steps run on the device.
//
// Thread safety: one thread (the worker's compute thread) calls it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "frugal/engine/replica.h"
#include "frugal/optim/sparse_optimizer.h"

namespace frugal::engine {

class DeviceInner {
 public:
  // params: the model's fp32 tensors, in the layout's slot order.
  DeviceInner(const optim::OptimizerOptions& options, const std::vector<torch::Tensor>& params);

  // One dense step of every parameter from its .grad (none: a zero
  // gradient) at learning rate lr, as the host optimizer's StepDense does;
  // then clears the gradients. Queues device work and does not wait for it.
  void Step(std::vector<torch::Tensor>& params, double lr);

  // The state into the host optimizers (one per bucket of layout), in their
  // dense form (SparseOptimizer::DenseBuffers); waits for the device.
  void Export(const BucketLayout& layout, const std::vector<std::unique_ptr<optim::SparseOptimizer>>& host) const;
  // The state from the host optimizers (after a restore).
  void Import(const BucketLayout& layout, const std::vector<std::unique_ptr<optim::SparseOptimizer>>& host);

 private:
  optim::OptimizerOptions o_;
  torch::Device device_;
  // Per parameter: SGD's momentum buffer or Adam's first moment; Adam's
  // second moment. Undefined until the first step (SGD) or never (SGD
  // without momentum).
  std::vector<torch::Tensor> first_, second_;
  std::vector<std::vector<int64_t>> shapes_;  // per parameter
  uint64_t steps_ = 0;
};

}  // namespace frugal::engine
