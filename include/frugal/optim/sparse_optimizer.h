// SparseOptimizer: SGD / Adam / AdamW on a flat fp32 parameter buffer that
// update only the coordinates they are given.
//
// One instance per parameter tensor; it owns that tensor's optimizer state
// (momentum buffer, Adam moments, step count), the parameters stay with the
// caller. With every index given, a step equals LibTorch's dense
// torch::optim::SGD / Adam / AdamW step (tested to relative error 1e-6 over
// 100 steps in sparse_optimizer_torch_test.cc).
//
// Coordinates NOT in `indices` are left completely alone: parameter, momentum
// buffer and Adam moments keep their values, and no weight decay is applied to
// them. Adam's step count (bias correction) is per tensor and advances on every
// call, as in torch.optim.SparseAdam. See "Un-updated coordinates" in
// docs/design/kernels.md for why.
//
// Thread safety: not thread-safe; distinct instances are independent.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frugal/common/span.h"
#include "frugal/common/status.h"

namespace frugal::optim {

struct OptimizerOptions {
  // "sgd", "adam" or "adamw". Default: "sgd".
  std::string kind = "sgd";
  // Learning rate. Default: 0.01.
  double lr = 0.01;
  // L2 penalty (sgd, adam: added to the gradient) or decoupled decay
  // (adamw: p *= 1 - lr * weight_decay). Default: 0.
  double weight_decay = 0.0;
  // SGD. Defaults as torch: momentum 0, dampening 0, no Nesterov.
  // Nesterov requires momentum > 0 and dampening == 0.
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  // Adam/AdamW. Defaults as torch: betas (0.9, 0.999), eps 1e-8.
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};

// Every field equal (the kind and each hyperparameter).
bool operator==(const OptimizerOptions& a, const OptimizerOptions& b);
inline bool operator!=(const OptimizerOptions& a, const OptimizerOptions& b) { return !(a == b); }

class SparseOptimizer {
 public:
  virtual ~SparseOptimizer() = default;

  // Updates params[indices[j]] with gradient values[j], j < indices.size().
  // REQUIRES: params.size() == size(). Fails with InvalidArgument, before
  // changing anything, if indices are not strictly increasing or out of range,
  // sizes disagree, or a gradient value is NaN/Inf (the message names the
  // tensor and the index).
  virtual Status Step(Span<float> params, Span<const uint32_t> indices, Span<const float> values) = 0;

  // Same as Step with every index 0..size()-1 and grad as values.
  virtual Status StepDense(Span<float> params, Span<const float> grad) = 0;

  virtual void set_lr(double lr) = 0;
  virtual double lr() const = 0;
  virtual size_t size() const = 0;
  virtual const std::string& tensor_name() const = 0;

  // Byte form of the optimizer state (buffers, step count) for checkpoints.
  std::vector<uint8_t> SerializeState() const;
  // The same bytes appended to *out (a checkpoint section built in place),
  // and their count.
  virtual void AppendState(std::vector<uint8_t>* out) const = 0;
  virtual size_t StateBytes() const = 0;
  // Fails, leaving the state unchanged, on malformed bytes or another shape/kind.
  virtual Status DeserializeState(Span<const uint8_t> bytes) = 0;

  // The state in dense form, for a caller that takes the same dense steps
  // elsewhere (LocalSync's inner steps on the model's device,
  // Note [Inner steps on the device] in src/engine/device_inner.cc): its
  // buffers, each size() floats (SGD: the momentum buffer when momentum > 0, else none;
  // Adam/AdamW: the first and second moments), and its step count (Adam:
  // the bias correction's; SGD: 1 once the momentum buffer exists, else 0).
  // REQUIRES: only StepDense was called, so an SGD momentum buffer exists
  // for every coordinate or for none.
  virtual std::vector<float*> DenseBuffers() = 0;
  virtual uint64_t dense_steps() const = 0;
  virtual void set_dense_steps(uint64_t steps) = 0;
};

// InvalidArgument for an unknown kind or out-of-range option (negative lr,
// betas outside [0, 1), Nesterov without momentum, ...).
Result<std::unique_ptr<SparseOptimizer>> CreateSparseOptimizer(const OptimizerOptions& options,
                                                                size_t num_params,
                                                                const std::string& tensor_name);

// One contiguous range of a buffer with its own settings: a torch
// optimizer's parameter group, read for the step mode. `lr_factor` is the
// group's learning rate over the schedule's: set_lr(lr) gives the range
// lr * lr_factor (options.lr is not used).
struct OptimizerSegment {
  size_t size = 0;
  OptimizerOptions options;
  double lr_factor = 1.0;
};

// An optimizer over consecutive segments (sizes summing to the buffer's),
// each stepped by its own settings and holding its own state, as torch
// steps each parameter group by its own; a step's indices are split among
// them. Its state bytes are each segment's, length-prefixed. A single
// segment with lr_factor 1 is the plain optimizer of its options, state
// bytes included. The composite of several has no DenseBuffers (empty: it
// is for the step pipeline, whose steps are sparse). InvalidArgument for an
// empty list, a zero-sized segment, or what CreateSparseOptimizer refuses.
Result<std::unique_ptr<SparseOptimizer>> CreateSegmentedOptimizer(const std::vector<OptimizerSegment>& segments,
                                                                   const std::string& tensor_name);

}  // namespace frugal::optim
