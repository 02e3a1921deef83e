// ErrorFeedback: keeps what a sparsifier did not send, so it is sent later.
//
// Per call, with residual r (zero at start) and gradient g:
//   acc = r + g                      (fp32, element-wise)
//   sent = sparsifier(acc)           (values copied from acc, then rounded to
//                                     what the wire carries: RoundToWire)
//   r' = acc - sent at the sent coordinates, acc elsewhere
// so that, bit for bit, sent + r' == r + g: nothing is lost or invented.
// Without rounding (fp32) r' is 0 where sent. With rounding the difference is
// exact (value_codes.h), so the rounding error of fp16 or of int8 / int4
// codes is sent in a later step instead of being lost.
//
// Optional DGC momentum correction (Lin et al., "Deep Gradient Compression"),
// enabled by momentum > 0: the residual accumulates velocity instead of raw
// gradients, u = m*u + g; r = r + u; and both u and r are cleared where sent
// (momentum factor masking). Use it with a momentum-free optimizer.
//
// One instance per tensor. Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frugal/common/span.h"
#include "frugal/common/status.h"
#include "frugal/compress/sparse_vector.h"
#include "frugal/compress/sparsifier.h"
#include "frugal/compress/value_codes.h"

namespace frugal::compress {

struct ErrorFeedbackOptions {
  // Named in errors. Default: "".
  std::string tensor_name;
  // DGC momentum correction factor; 0 disables it. Default: 0.
  float momentum = 0.0f;
  // How sent values cross the wire; they are rounded to it. Default: fp32.
  ValueEncoding wire_values = ValueEncoding::kFp32;
};

// L1 masses of one Compress call (Note [Deferred mass] in error_feedback.cc).
struct FeedbackMass {
  double held = 0;     // |r + g|_1 (r + u with DGC momentum): what could be sent
  double sent = 0;     // |sent|_1 after rounding to the wire
  double held_sq = 0;  // |r + g|_2^2
  double sent_sq = 0;  // |sent|_2^2
};

class ErrorFeedback {
 public:
  ErrorFeedback(size_t num_elements, ErrorFeedbackOptions options);

  // Runs one step (see above) and replaces *out with what to send.
  // A non-finite gradient value returns InvalidArgument naming the tensor and
  // leaves the state unchanged. REQUIRES: grad.size() == size().
  Status Compress(Span<const float> grad, Sparsifier& sparsifier, double density, SparseVector* out);

  size_t size() const { return residual_.size(); }
  Span<const float> residual() const { return Span<const float>(residual_.data(), residual_.size()); }
  // DGC velocity u (empty unless momentum > 0).
  Span<const float> velocity() const { return Span<const float>(velocity_.data(), velocity_.size()); }
  const ErrorFeedbackOptions& options() const { return options_; }
  // The masses of the last successful Compress (zero before the first).
  const FeedbackMass& last_mass() const { return last_mass_; }

  // Zeroes residual and velocity.
  void Reset();

  // Byte form of residual and velocity for checkpoints.
  std::vector<uint8_t> Serialize() const;
  // The same bytes appended to *out (a checkpoint section built in place),
  // and their count.
  void AppendTo(std::vector<uint8_t>* out) const;
  size_t SerializedSize() const { return 4 + 1 + 1 + 8 + 4 * (residual_.size() + velocity_.size()); }
  // Fails (state unchanged) if the bytes are malformed or sized for another tensor.
  Status Deserialize(Span<const uint8_t> bytes);

 private:
  ErrorFeedbackOptions options_;
  std::vector<float> residual_;
  std::vector<float> velocity_;
  FeedbackMass last_mass_;
};

}  // namespace frugal::compress
