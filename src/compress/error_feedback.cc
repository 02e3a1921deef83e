#include "frugal/compress/error_feedback.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace frugal::compress {
namespace {
constexpr uint32_t kMagic = 0x46454646;  // "FFEF"
constexpr uint8_t kVersion = 1;
}  // namespace

ErrorFeedback::ErrorFeedback(size_t num_elements, ErrorFeedbackOptions options)
    : options_(std::move(options)), residual_(num_elements, 0.0f) {
  if (options_.momentum > 0.0f) velocity_.assign(num_elements, 0.0f);
}

void ErrorFeedback::Reset() {
  std::fill(residual_.begin(), residual_.end(), 0.0f);
  std::fill(velocity_.begin(), velocity_.end(), 0.0f);
}

Status ErrorFeedback::Compress(Span<const float> grad, Sparsifier& sparsifier, double density, SparseVector* out) {
  if (grad.size() != residual_.size()) {
    return Status::InvalidArgument("tensor '" + options_.tensor_name + "': gradient has " +
                                   std::to_string(grad.size()) + " elements, error feedback expects " +
                                   std::to_string(residual_.size()));
  }
  // Checked before touching the state, so a bad step can be skipped cleanly.
  FRUGAL_RETURN_IF_ERROR(CheckFinite(grad, options_.tensor_name));
  const size_t n = residual_.size();
  float* r = residual_.data();
  const float* g = grad.data();
  // Eight float lanes, so that the sums vectorise; added in double per call.
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float sq_lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const size_t whole = n - n % 8;
  if (velocity_.empty()) {
    for (size_t i = 0; i < whole; i += 8) {
      for (size_t l = 0; l < 8; ++l) {
        r[i + l] += g[i + l];
        lanes[l] += std::fabs(r[i + l]);
        sq_lanes[l] += r[i + l] * r[i + l];
      }
    }
    for (size_t i = whole; i < n; ++i) {
      r[i] += g[i];
      lanes[0] += std::fabs(r[i]);
      sq_lanes[0] += r[i] * r[i];
    }
  } else {
    float* u = velocity_.data();
    const float m = options_.momentum;
    for (size_t i = 0; i < n; ++i) {
      u[i] = m * u[i] + g[i];
      r[i] += u[i];
      lanes[i % 8] += std::fabs(r[i]);
      sq_lanes[i % 8] += r[i] * r[i];
    }
  }
  Status st = sparsifier.Sparsify(Span<const float>(r, n), density, out);
  if (!st.ok()) return st.WithContext("error feedback");  // e.g. residual overflowed to Inf
  RoundToWire(options_.wire_values, Span<float>(out->values.data(), out->values.size()));
  double sent = 0, sent_sq = 0;
  for (size_t j = 0; j < out->indices.size(); ++j) {
    const float v = out->values[j];
    r[out->indices[j]] -= v;
    sent += std::fabs(v);
    sent_sq += static_cast<double>(v) * v;
  }
  if (!velocity_.empty()) {
    for (uint32_t i : out->indices) velocity_[i] = 0.0f;
  }
  last_mass_ = FeedbackMass{0, sent, 0, sent_sq};
  for (size_t l = 0; l < 8; ++l) {
    last_mass_.held += lanes[l];
    last_mass_.held_sq += sq_lanes[l];
  }
  return Status::Ok();
}

// Note [Deferred mass]
// What a sparse step leaves in the residual is sent later, not lost; the
// cost is delay. By Little's law the mean delay (in steps) of gradient mass
// in the residual is its backlog over its throughput:
//   deferral = (|r + g|_1 - |sent|_1) / |sent|_1,
// and sent / held is the share of the backlog sent each step (in L1, and
// in squared L2, which weighs the large coordinates). They come
// from sums already in reach (the accumulation pass and the sent values),
// so they are measured on every call; the metrics report them per window
// (docs/metrics.md). Sign cancellation inside the residual makes the L1
// backlog an upper bound on the mass that is still owed.

std::vector<uint8_t> ErrorFeedback::Serialize() const {
  std::vector<uint8_t> out;
  out.reserve(SerializedSize());
  AppendTo(&out);
  return out;
}

void ErrorFeedback::AppendTo(std::vector<uint8_t>* out) const {
  auto put = [out](const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    out->insert(out->end(), b, b + n);
  };
  put(&kMagic, 4);  // Little-endian hosts only (x86-64, arm64).
  out->push_back(kVersion);
  out->push_back(velocity_.empty() ? 0 : 1);
  const uint64_t n = residual_.size();
  put(&n, 8);
  put(residual_.data(), 4 * residual_.size());
  put(velocity_.data(), 4 * velocity_.size());
}

Status ErrorFeedback::Deserialize(Span<const uint8_t> bytes) {
  const std::string where = "tensor '" + options_.tensor_name + "': error feedback state: ";
  if (bytes.size() < 14) return Status::Corruption(where + "truncated header");
  uint32_t magic;
  std::memcpy(&magic, bytes.data(), 4);
  if (magic != kMagic) return Status::Corruption(where + "bad magic");
  if (bytes[4] != kVersion) return Status::Corruption(where + "unsupported version");
  bool has_velocity = bytes[5] == 1;
  if (bytes[5] > 1) return Status::Corruption(where + "bad flags");
  if (has_velocity != !velocity_.empty()) {
    return Status::InvalidArgument(where + "momentum correction setting differs from the saved state");
  }
  uint64_t n;
  std::memcpy(&n, bytes.data() + 6, 8);
  if (n != residual_.size()) {
    return Status::InvalidArgument(where + "saved for " + std::to_string(n) + " elements, tensor has " +
                                   std::to_string(residual_.size()));
  }
  if (bytes.size() != 14 + 4 * n * (has_velocity ? 2 : 1)) return Status::Corruption(where + "wrong length");
  std::memcpy(residual_.data(), bytes.data() + 14, 4 * n);
  if (has_velocity) std::memcpy(velocity_.data(), bytes.data() + 14 + 4 * n, 4 * n);
  return Status::Ok();
}

}  // namespace frugal::compress
