// "block": the cache-aware sparsifier of StellaTrain.
//
// Note [Block sparsifier]
// The unit of selection is a block of 16 fp32 values, one 64-byte cache line,
// scored by its L1 norm (Note [Block score order] in block_scan.h). Choosing
// whole lines means the scan reads memory strictly sequentially, the output is
// runs of 16 contiguous values (one index per block on the wire, contiguous
// optimizer updates), and the score pass is a pure streaming read that runs at
// close to memory bandwidth.
//
// Each call:
//  1. Scores every block (the whole tensor, every call: stopping early once
//     enough blocks were found would favour the front of the tensor). A short
//     tail block is scored with zeros for the missing values.
//  2. With the threshold T remembered from the previous call, splits block ids
//     into `sel` (score >= T) and `cand` (T/2 <= score < T) in one pass over
//     the scores (1/16 the size of the tensor).
//  3. Wants exactly B = ceil(k / 16) blocks. If |sel| >= B, keeps the B best of
//     sel; otherwise fills the shortfall with the best of cand, and only if cand
//     is too small as well, with the best of all remaining blocks. "Best of a
//     list" is a selection (nth_element) over that list, never a sort, and
//     when T tracks the distribution the lists are about B long.
//  4. Sets T to the score of the weakest chosen block, so the next call on a
//     similar gradient finds about B blocks above T.
// The first call (T = 0) selects over all blocks, which calibrates T. Taking
// exactly B blocks (rather than every block above T) bounds the message size
// even when the gradient distribution shifts suddenly.
// Ties on score are broken by lower block id, so the result is deterministic.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "block_scan.h"
#include "sparsifier_impl.h"

namespace frugal::compress::internal {
namespace {

constexpr float kCandidateFraction = 0.5f;

class BlockSparsifier final : public Sparsifier {
 public:
  explicit BlockSparsifier(const SparsifierOptions& options) : options_(options) {
    scores_fn_ = GetBlockScoresFn(options.simd);
    if (scores_fn_ == nullptr) scores_fn_ = GetBlockScoresFn(SimdLevel::kAuto);
  }

  Status Sparsify(Span<const float> grad, double density, SparseVector* out) override {
    const size_t n = grad.size();
    FRUGAL_RETURN_IF_ERROR(CheckSparsifyArgs(n, density, options_.tensor_name));
    out->Clear(n);
    const size_t k = TargetCount(n, density);
    const size_t full_blocks = n / kBlockSize;
    const size_t tail = n % kBlockSize;
    const size_t num_blocks = full_blocks + (tail ? 1 : 0);

    scores_.resize(num_blocks);
    scores_fn_(grad.data(), full_blocks, scores_.data());
    if (tail) scores_[full_blocks] = ShortBlockScore(grad.data() + full_blocks * kBlockSize, tail);

    // One pass over the scores: split by threshold and catch non-finite input
    // (a NaN or Inf anywhere makes its block's score NaN or Inf).
    const float hi = static_cast<float>(threshold_);
    const float lo = hi * kCandidateFraction;
    sel_.resize(num_blocks);
    cand_.resize(num_blocks);
    size_t num_sel = 0, num_cand = 0;
    bool finite = true;
    for (size_t b = 0; b < num_blocks; ++b) {
      const float s = scores_[b];
      finite &= s <= FLT_MAX;
      // Branch-free appends: write unconditionally, advance on the predicate.
      sel_[num_sel] = static_cast<uint32_t>(b);
      cand_[num_cand] = static_cast<uint32_t>(b);
      num_sel += s >= hi;
      num_cand += (s < hi) & (s >= lo);
    }
    if (!finite) {
      Status st = CheckFinite(grad, options_.tensor_name);
      if (!st.ok()) return st;
      // Only finite values whose block sum overflowed: clamp so ordering still works.
      for (float& s : scores_) s = std::min(s, FLT_MAX);
    }
    sel_.resize(num_sel);
    cand_.resize(num_cand);
    ++calls_;
    const size_t want = std::min(num_blocks, (k + kBlockSize - 1) / kBlockSize);
    if (want == 0) return Status::Ok();

    const float* scores = scores_.data();
    if (num_sel >= want) {
      SelectLargest(scores, sel_, want, &scratch_, &chosen_);
    } else {
      const size_t shortfall = want - num_sel;
      if (num_cand < shortfall) {
        // T was far too high for this gradient: fall back to every block below T.
        cand_.clear();
        for (size_t b = 0; b < num_blocks; ++b) {
          if (scores[b] < hi) cand_.push_back(static_cast<uint32_t>(b));
        }
      }
      SelectLargest(scores, cand_, shortfall, &scratch_, &fill_);
      chosen_.resize(want);
      std::merge(sel_.begin(), sel_.end(), fill_.begin(), fill_.end(), chosen_.begin());
    }
    float weakest = FLT_MAX;
    for (uint32_t b : chosen_) weakest = std::min(weakest, scores[b]);
    threshold_ = weakest;

    out->indices.reserve(chosen_.size() * kBlockSize);
    out->values.reserve(chosen_.size() * kBlockSize);
    for (uint32_t b : chosen_) {
      const size_t start = size_t{b} * kBlockSize;
      const size_t end = std::min(start + kBlockSize, n);
      for (size_t i = start; i < end; ++i) {
        out->indices.push_back(static_cast<uint32_t>(i));
        out->values.push_back(grad[i]);
      }
    }
    return Status::Ok();
  }

  SparsifierState state() const override {
    SparsifierState s;
    s.kind = kind();
    s.threshold = threshold_;
    s.calls = calls_;
    return s;
  }
  Status RestoreState(const SparsifierState& s) override {
    if (s.kind != kind()) return Status::InvalidArgument("cannot restore a '" + s.kind + "' state into block");
    if (!std::isfinite(s.threshold) || s.threshold < 0) return Status::InvalidArgument("invalid block threshold");
    threshold_ = s.threshold;
    calls_ = s.calls;
    return Status::Ok();
  }
  const char* kind() const override { return "block"; }

 private:
  SparsifierOptions options_;
  BlockScoresFn scores_fn_;
  double threshold_ = 0.0;
  uint64_t calls_ = 0;
  // Scratch reused across calls so the steady state does not allocate.
  std::vector<float> scores_;
  std::vector<uint32_t> sel_, cand_, chosen_, fill_;
  std::vector<float> scratch_;
};

}  // namespace

std::unique_ptr<Sparsifier> MakeBlockSparsifier(const SparsifierOptions& options) {
  return std::make_unique<BlockSparsifier>(options);
}

}  // namespace frugal::compress::internal
