// The model zoo (LibTorch C++ API). Each model is described layer by layer in
// docs/design/models.md so the Python baselines build the identical network.
//
//   mlp       784-2048-2048-10, ReLU                              5,824,522 params
//   cnn       conv32-pool-conv64-pool-fc512-fc10                  1,630,090 params
//   resnet18  ResNet-18 for 1x28x28 (3x3 stem, no max-pool)     11,172,810 params
//   gpt-tiny  byte-level decoder-only transformer, 4 layers x 256,
//             4 heads, context 128                                 3,323,392 params
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "frugal/common/status.h"

namespace frugal::models {

// A classifier: input in, logits out with the classes in dimension 1, the
// layout torch's cross_entropy takes. Image models: NCHW float ->
// [N, classes]. Language models (SequenceLength(name) > 0): token ids
// [N, T] int64, T <= SequenceLength -> [N, vocab, T], position t predicting
// token t + 1.
class Model : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
};

// gpt-tiny's shape (docs/design/models.md).
inline constexpr int64_t kGptTinyContext = 128;
inline constexpr int64_t kGptTinyWidth = 256;
inline constexpr int64_t kGptTinyLayers = 4;
inline constexpr int64_t kGptTinyHeads = 4;
inline constexpr int64_t kGptTinyHidden = 1024;

// Names accepted by CreateModel, in a stable order.
const std::vector<std::string>& ModelNames();

// Tokens per sample of a language model (its context length); 0 for the
// image classifiers and unknown names.
int64_t SequenceLength(const std::string& name);

// Builds a freshly initialised model. Initialisation uses LibTorch's default
// generator, so call torch::manual_seed first for reproducible weights. For a
// language model num_classes is the vocabulary (256 for byte-level text).
Result<std::shared_ptr<Model>> CreateModel(const std::string& name, int64_t num_classes = 10);

// Number of trainable scalars.
int64_t CountParameters(const torch::nn::Module& module);

}  // namespace frugal::models
