// "topk": exact top-k by magnitude, the quality reference for `block`.
#include <algorithm>
#include <cmath>

#include "sparsifier_impl.h"

namespace frugal::compress::internal {
namespace {

class TopkSparsifier final : public Sparsifier {
 public:
  explicit TopkSparsifier(const SparsifierOptions& options) : options_(options) {}

  Status Sparsify(Span<const float> grad, double density, SparseVector* out) override {
    const size_t n = grad.size();
    FRUGAL_RETURN_IF_ERROR(CheckSparsifyArgs(n, density, options_.tensor_name));
    FRUGAL_RETURN_IF_ERROR(CheckFinite(grad, options_.tensor_name));
    ++calls_;
    out->Clear(n);
    const size_t k = TargetCount(n, density);
    if (k == 0) return Status::Ok();
    // nth_element on a contiguous copy of the magnitudes is several times
    // faster than on an index array with an indirect comparator.
    mags_.resize(n);
    for (size_t i = 0; i < n; ++i) mags_[i] = std::fabs(grad[i]);
    std::nth_element(mags_.begin(), mags_.begin() + (k - 1), mags_.end(), std::greater<float>());
    const float kth = mags_[k - 1];
    size_t above = 0;
    for (size_t i = 0; i < n; ++i) above += std::fabs(grad[i]) > kth;
    size_t ties_left = k - above;
    out->indices.reserve(k);
    out->values.reserve(k);
    for (size_t i = 0; i < n; ++i) {
      float m = std::fabs(grad[i]);
      if (m > kth || (m == kth && ties_left > 0)) {
        if (m == kth) --ties_left;
        out->indices.push_back(static_cast<uint32_t>(i));
        out->values.push_back(grad[i]);
      }
    }
    return Status::Ok();
  }

  SparsifierState state() const override {
    SparsifierState s;
    s.kind = kind();
    s.calls = calls_;
    return s;
  }
  Status RestoreState(const SparsifierState& s) override {
    if (s.kind != kind()) return Status::InvalidArgument("cannot restore a '" + s.kind + "' state into topk");
    calls_ = s.calls;
    return Status::Ok();
  }
  const char* kind() const override { return "topk"; }

 private:
  SparsifierOptions options_;
  uint64_t calls_ = 0;
  std::vector<float> mags_;
};

}  // namespace

std::unique_ptr<Sparsifier> MakeTopkSparsifier(const SparsifierOptions& options) {
  return std::make_unique<TopkSparsifier>(options);
}

}  // namespace frugal::compress::internal
