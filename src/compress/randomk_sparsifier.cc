// "randomk": k coordinates uniformly at random, for ablations.
#include <vector>

#include "sparsifier_impl.h"

namespace frugal::compress::internal {
namespace {

class RandomkSparsifier final : public Sparsifier {
 public:
  explicit RandomkSparsifier(const SparsifierOptions& options) : options_(options), rng_(options.seed) {}

  Status Sparsify(Span<const float> grad, double density, SparseVector* out) override {
    const size_t n = grad.size();
    FRUGAL_RETURN_IF_ERROR(CheckSparsifyArgs(n, density, options_.tensor_name));
    FRUGAL_RETURN_IF_ERROR(CheckFinite(grad, options_.tensor_name));
    ++calls_;
    out->Clear(n);
    const size_t k = TargetCount(n, density);
    if (k == 0) return Status::Ok();
    // Floyd's algorithm: exactly k distinct indices with k draws, marked in a
    // bitmap so the output comes out sorted without a sort.
    marks_.assign((n + 63) / 64, 0);
    for (size_t j = n - k; j < n; ++j) {
      size_t t = Below(&rng_, j + 1);
      if (marks_[t / 64] >> (t % 64) & 1) t = j;
      marks_[t / 64] |= uint64_t{1} << (t % 64);
    }
    out->indices.reserve(k);
    out->values.reserve(k);
    for (size_t w = 0; w < marks_.size(); ++w) {
      uint64_t bits = marks_[w];
      while (bits) {
        size_t i = w * 64 + static_cast<size_t>(__builtin_ctzll(bits));
        bits &= bits - 1;
        out->indices.push_back(static_cast<uint32_t>(i));
        out->values.push_back(grad[i]);
      }
    }
    return Status::Ok();
  }

  SparsifierState state() const override {
    SparsifierState s;
    s.kind = kind();
    s.rng_state = rng_;
    s.calls = calls_;
    return s;
  }
  Status RestoreState(const SparsifierState& s) override {
    if (s.kind != kind()) return Status::InvalidArgument("cannot restore a '" + s.kind + "' state into randomk");
    rng_ = s.rng_state;
    calls_ = s.calls;
    return Status::Ok();
  }
  const char* kind() const override { return "randomk"; }

 private:
  SparsifierOptions options_;
  uint64_t rng_;
  uint64_t calls_ = 0;
  std::vector<uint64_t> marks_;
};

}  // namespace

std::unique_ptr<Sparsifier> MakeRandomkSparsifier(const SparsifierOptions& options) {
  return std::make_unique<RandomkSparsifier>(options);
}

}  // namespace frugal::compress::internal
