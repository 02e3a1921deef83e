// The model zoo (LibTorch C++ API). Each model is described layer by layer in
// docs/models.md so the Python baselines build the identical network.
//
//   mlp       784-2048-2048-10, ReLU                              5,824,522 params
//   cnn       conv32-pool-conv64-pool-fc512-fc10                  1,630,090 params
//   resnet18  ResNet-18 for 1x28x28 (3x3 stem, no max-pool)     11,172,810 params
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "frugal/common/status.h"

namespace frugal::models {

// A classifier: NCHW float input, logits out.
class Model : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
};

// Names accepted by CreateModel, in a stable order.
const std::vector<std::string>& ModelNames();

// Builds a freshly initialised model. Initialisation uses LibTorch's default
// generator, so call torch::manual_seed first for reproducible weights.
Result<std::shared_ptr<Model>> CreateModel(const std::string& name, int64_t num_classes = 10);

// Number of trainable scalars.
int64_t CountParameters(const torch::nn::Module& module);

}  // namespace frugal::models
