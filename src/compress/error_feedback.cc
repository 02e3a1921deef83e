#include "frugal/compress/error_feedback.h"

#include <algorithm>
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
  if (velocity_.empty()) {
    for (size_t i = 0; i < n; ++i) r[i] += g[i];
  } else {
    float* u = velocity_.data();
    const float m = options_.momentum;
    for (size_t i = 0; i < n; ++i) {
      u[i] = m * u[i] + g[i];
      r[i] += u[i];
    }
  }
  Status st = sparsifier.Sparsify(Span<const float>(r, n), density, out);
  if (!st.ok()) return st.WithContext("error feedback");  // e.g. residual overflowed to Inf
  RoundToWire(options_.wire_values, Span<float>(out->values.data(), out->values.size()));
  for (size_t j = 0; j < out->indices.size(); ++j) r[out->indices[j]] -= out->values[j];
  if (!velocity_.empty()) {
    for (uint32_t i : out->indices) velocity_[i] = 0.0f;
  }
  return Status::Ok();
}

std::vector<uint8_t> ErrorFeedback::Serialize() const {
  std::vector<uint8_t> out(4 + 1 + 1 + 8 + 4 * (residual_.size() + velocity_.size()));
  uint8_t* p = out.data();
  std::memcpy(p, &kMagic, 4);  // Little-endian hosts only (x86-64, arm64).
  p[4] = kVersion;
  p[5] = velocity_.empty() ? 0 : 1;
  uint64_t n = residual_.size();
  std::memcpy(p + 6, &n, 8);
  std::memcpy(p + 14, residual_.data(), 4 * residual_.size());
  if (!velocity_.empty()) std::memcpy(p + 14 + 4 * n, velocity_.data(), 4 * n);
  return out;
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
