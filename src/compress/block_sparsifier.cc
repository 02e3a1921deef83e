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
//     into `sel` (score >= T) and `cand` (T/2 <= score < T), fused into the
//     scoring pass (block_scan.h), so the tensor is read exactly once.
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
#include <cstring>

#include "block_scan.h"
#include "sparsifier_impl.h"

namespace frugal::compress::internal {
namespace {

constexpr float kCandidateFraction = 0.5f;

class BlockSparsifier final : public Sparsifier {
 public:
  explicit BlockSparsifier(const SparsifierOptions& options) : options_(options) {
    split_fn_ = GetScoreSplitFn(options.simd);
    if (split_fn_ == nullptr) split_fn_ = GetScoreSplitFn(SimdLevel::kAuto);
  }

  Status Sparsify(Span<const float> grad, double density, SparseVector* out) override {
    const size_t n = grad.size();
    FRUGAL_RETURN_IF_ERROR(CheckSparsifyArgs(n, density, options_.tensor_name));
    out->Clear(n);
    const size_t k = TargetCount(n, density);
    const size_t num_blocks = n / kBlockSize + (n % kBlockSize ? 1 : 0);
    // Grow-only scratch: resizing down and up again would re-zero megabytes.
    if (scores_.size() < num_blocks) {
      scores_.resize(num_blocks);
      sel_.resize(num_blocks);
      cand_.resize(num_blocks);
    }

    const float hi = static_cast<float>(threshold_);
    BlockSplit split;
    FRUGAL_RETURN_IF_ERROR(ScoreAndSplit(grad, hi, &split));
    ++calls_;
    const size_t want = std::min(num_blocks, (k + kBlockSize - 1) / kBlockSize);
    if (want == 0) return Status::Ok();

    ChooseBlocks(num_blocks, want, hi, split);
    float weakest = FLT_MAX;
    for (uint32_t b : chosen_) weakest = std::min(weakest, scores_[b]);
    threshold_ = weakest;
    CopyChosenBlocks(grad, out);
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
  // Steps 1 and 2 of the Note in one pass: fills scores_, and sel_/cand_ with
  // the block ids at or above `hi` and in [hi/2, hi). A NaN or Inf anywhere
  // makes its block's score non-finite, which the pass reports.
  Status ScoreAndSplit(Span<const float> grad, float hi, BlockSplit* out_split) {
    const size_t n = grad.size();
    const size_t full_blocks = n / kBlockSize;
    const size_t tail = n % kBlockSize;
    const size_t num_blocks = full_blocks + (tail ? 1 : 0);
    const float lo = hi * kCandidateFraction;
    BlockSplit split = split_fn_(grad.data(), full_blocks, hi, lo, scores_.data(), sel_.data(), cand_.data());
    if (tail) {
      const float s = ShortBlockScore(grad.data() + full_blocks * kBlockSize, tail);
      scores_[full_blocks] = s;
      if (s >= hi) sel_[split.num_sel++] = static_cast<uint32_t>(full_blocks);
      else if (s >= lo) cand_[split.num_cand++] = static_cast<uint32_t>(full_blocks);
      split.finite &= s <= FLT_MAX;
    }
    if (!split.finite) {
      FRUGAL_RETURN_IF_ERROR(CheckFinite(grad, options_.tensor_name));
      // Only finite values whose block sum overflowed: clamp and redo the split.
      split = BlockSplit();
      for (size_t b = 0; b < num_blocks; ++b) {
        const float s = std::min(scores_[b], FLT_MAX);
        scores_[b] = s;
        if (s >= hi) sel_[split.num_sel++] = static_cast<uint32_t>(b);
        else if (s >= lo) cand_[split.num_cand++] = static_cast<uint32_t>(b);
      }
    }
    *out_split = split;
    return Status::Ok();
  }

  // Step 3 of the Note: sets chosen_ to the `want` best blocks, ascending.
  void ChooseBlocks(size_t num_blocks, size_t want, float hi, const BlockSplit& split) {
    const float* scores = scores_.data();
    Span<const uint32_t> sel(sel_.data(), split.num_sel);
    Span<const uint32_t> cand(cand_.data(), split.num_cand);
    if (sel.size() >= want) {
      SelectLargest(scores, sel, want, &scratch_, &chosen_);
      return;
    }
    const size_t shortfall = want - sel.size();
    if (cand.size() < shortfall) {
      // T was far too high for this gradient: fall back to every block below T.
      size_t m = 0;
      for (size_t b = 0; b < num_blocks; ++b) {
        cand_[m] = static_cast<uint32_t>(b);
        m += scores[b] < hi;
      }
      cand = Span<const uint32_t>(cand_.data(), m);
    }
    SelectLargest(scores, cand, shortfall, &scratch_, &fill_);
    chosen_.resize(want);
    std::merge(sel.begin(), sel.end(), fill_.begin(), fill_.end(), chosen_.begin());
  }

  // Whole blocks out: sizes known up front, values copied a line at a time.
  void CopyChosenBlocks(Span<const float> grad, SparseVector* out) const {
    const size_t n = grad.size();
    const size_t full_blocks = n / kBlockSize;
    const size_t tail = n % kBlockSize;
    size_t total = chosen_.size() * kBlockSize;
    if (!chosen_.empty() && tail && chosen_.back() == full_blocks) total -= kBlockSize - tail;
    out->indices.resize(total);
    out->values.resize(total);
    uint32_t* idx = out->indices.data();
    float* val = out->values.data();
    for (uint32_t b : chosen_) {
      const size_t start = size_t{b} * kBlockSize;
      const size_t len = std::min(kBlockSize, n - start);
      for (size_t i = 0; i < len; ++i) idx[i] = static_cast<uint32_t>(start + i);
      std::memcpy(val, grad.data() + start, len * sizeof(float));
      idx += len;
      val += len;
    }
  }

  SparsifierOptions options_;
  ScoreSplitFn split_fn_;
  double threshold_ = 0.0;
  uint64_t calls_ = 0;
  // Scratch reused across calls so the steady state does not allocate;
  // scores_, sel_, cand_ have at least as many entries as the largest input's blocks.
  std::vector<float> scores_;
  std::vector<uint32_t> sel_, cand_, chosen_, fill_;
  std::vector<float> scratch_;
};

}  // namespace

std::unique_ptr<Sparsifier> MakeBlockSparsifier(const SparsifierOptions& options) {
  return std::make_unique<BlockSparsifier>(options);
}

}  // namespace frugal::compress::internal
