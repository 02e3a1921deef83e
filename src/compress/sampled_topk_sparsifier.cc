// "sampled_topk": exact top-k by magnitude at about the cost of one streaming
// pass over the tensor.
//
// Note [Sampled top-k]
// DGC's observation: the k-th largest magnitude can be estimated from a small
// random sample, and one pass then finds everything above the estimate. We
// use the estimate only to narrow the search, never to decide the answer, so
// the output is always exactly the top-k of `topk` (ties by lower index), bit
// for bit, and exactly k values; the sample decides only how much work it
// takes. Per call:
//  1. Sample m magnitudes at uniform random positions (SplitMix64 seeded by
//     SparsifierOptions::seed, state kept in SparsifierState::rng_state);
//     m = 64 n / k clamped to [4096, 32768], so about s = m k / n >= 64
//     sampled values lie above the k-th magnitude (fewer only at densities
//     below 0.2%). The threshold T is the sampled value at rank
//     r = s + 3 sqrt(s) + 3 from the top: the count of values >= T is about
//     n r / m (1.4 k at s = 64) with relative spread 1 / sqrt(r), so it falls
//     below k in about 0.2% of calls. T is at least the smallest positive
//     key, so runs of exact zeros never flood the list.
//  2. One branch-free pass (magnitude_scan.h) appends (id, value) of every
//     |v| >= T to a list, ids increasing, and returns the largest magnitude,
//     which also reveals NaN/Inf (Note [Magnitude keys]).
//  3. Correction. If the list has >= k entries, every value outside it is
//     below T <= the k-th magnitude, so the top-k is the k largest of the
//     list: a radix step finds the k-th key (a 2048-bucket histogram of
//     the keys between T and the maximum, then nth_element inside the one
//     bucket that holds it), and one pass over the list emits, ids in order.
//     If the list is short: rescan once with T at rank 4 r; if T is already the
//     smallest positive key, the tensor has fewer than k nonzeros and the
//     lowest-index zeros fill up (one more pass); and if the list overflows
//     its cap (twice its expected size plus 1024: only a huge run of equal
//     values at T does that) or the rescan is short too, select exactly over
//     the whole tensor with the same radix step. SampledTopkStats counts
//     these cases.
// The result never depends on the sample, so it is deterministic across
// workers and runs even if their RNG states differed. Tensors too small for
// the sample to pay (n < 4 m) or too dense (k > n / 4) go straight to the
// exact selection. We sample every call instead of reusing the previous
// call's threshold as DGC does: sampling costs a few percent of the pass, and
// a fresh estimate needs no warm-up and cannot be stale after a sudden shift
// in scale.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "magnitude_scan.h"
#include "sparsifier_impl.h"

namespace frugal::compress::internal {
namespace {

constexpr double kSampleHits = 64;
constexpr size_t kMinSample = 4096;
constexpr size_t kMaxSample = 32768;
constexpr uint32_t kSmallestPositiveKey = 1;
constexpr int kRadixBits = 11;

// A list of (id, raw bits) entries with increasing ids; ids == nullptr means id = position.
struct KeyedList {
  const uint32_t* ids;
  const uint32_t* bits;
  size_t size;
  uint32_t Id(size_t j) const { return ids ? ids[j] : static_cast<uint32_t>(j); }
  uint32_t Key(size_t j) const { return bits[j] & kSignMask; }
};

inline float FromBits(uint32_t bits) {
  float v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

// The count-th largest key of `in`, all of whose keys lie in [lo, hi], and
// how many keys are strictly larger. REQUIRES: 0 < count <= in.size.
std::pair<uint32_t, size_t> KthLargestKey(const KeyedList& in, size_t count, uint32_t lo, uint32_t hi,
                                          std::vector<uint32_t>* hist, std::vector<uint32_t>* scratch) {
  const uint32_t range = hi - lo;
  const int width = range == 0 ? 0 : 32 - __builtin_clz(range);
  const int shift = std::max(0, width - kRadixBits);
  hist->assign((size_t{range} >> shift) + 1, 0);
  for (size_t j = 0; j < in.size; ++j) ++(*hist)[(in.Key(j) - lo) >> shift];
  size_t bucket = hist->size() - 1, above = 0;
  while (above + (*hist)[bucket] < count) above += (*hist)[bucket--];
  if (shift == 0) return {lo + static_cast<uint32_t>(bucket), above};
  scratch->clear();
  for (size_t j = 0; j < in.size; ++j) {
    if (((in.Key(j) - lo) >> shift) == bucket) scratch->push_back(in.Key(j));
  }
  const size_t rank = count - above;  // 1-based rank inside the bucket
  std::nth_element(scratch->begin(), scratch->begin() + (rank - 1), scratch->end(), std::greater<uint32_t>());
  const uint32_t kth = (*scratch)[rank - 1];
  return {kth, above + static_cast<size_t>(rank - 1 - std::count(scratch->begin(), scratch->begin() + (rank - 1), kth))};
}

// Writes the `count` entries of `in` with the largest keys (ties: earlier
// entry first), in list order, to ids / values; returns the smallest chosen
// key. REQUIRES: 0 < count <= in.size, keys in [lo, hi].
uint32_t EmitLargest(const KeyedList& in, size_t count, uint32_t lo, uint32_t hi, std::vector<uint32_t>* hist,
                     std::vector<uint32_t>* scratch, uint32_t* ids, float* values) {
  const auto [kth, above] = KthLargestKey(in, count, lo, hi, hist, scratch);
  size_t ties_left = count - above;
  size_t out = 0;
  // Branch-free: about a third of the entries are dropped, unpredictably.
  for (size_t j = 0; j < in.size && out < count; ++j) {
    const uint32_t key = in.Key(j);
    const bool tie = key == kth && ties_left > 0;
    ids[out] = in.Id(j);
    values[out] = FromBits(in.bits[j]);
    out += (key > kth) | tie;
    ties_left -= tie;
  }
  return kth;
}

// Step 1 of the Note: m sampled keys, partially ordered by ScanThreshold.
struct Sample {
  std::vector<uint32_t> keys;
  double n_per_sample = 0;  // population values per sampled value
  size_t rank = 0;          // rank of the first threshold
  size_t ordered = 0;       // keys[0, ordered) are >= everything after them
};

void DrawSample(const float* x, size_t n, size_t k, uint64_t* rng, Sample* sample) {
  const double per_hit = static_cast<double>(n) / static_cast<double>(k);
  const size_t m = static_cast<size_t>(std::clamp(kSampleHits * per_hit, double{kMinSample}, double{kMaxSample}));
  sample->keys.resize(m);
  for (size_t j = 0; j < m; ++j) sample->keys[j] = MagnitudeKey(x[Below(rng, n)]);
  sample->n_per_sample = static_cast<double>(n) / static_cast<double>(m);
  const double s = static_cast<double>(m) / per_hit;
  sample->rank = static_cast<size_t>(std::ceil(s + 3 * std::sqrt(s))) + 3;
  sample->ordered = 0;
}

// The sampled key at `rank` from the top (clamped to [smallest positive, Inf]),
// and the list cap for it. REQUIRES: rank > sample->ordered, ranks increasing across calls.
uint32_t ScanThreshold(Sample* sample, size_t rank, size_t* cap) {
  auto& keys = sample->keys;
  rank = std::min(rank, keys.size());
  std::nth_element(keys.begin() + sample->ordered, keys.begin() + (rank - 1), keys.end(), std::greater<uint32_t>());
  sample->ordered = rank;
  *cap = static_cast<size_t>(2 * sample->n_per_sample * static_cast<double>(rank)) + 1024;
  return std::clamp(keys[rank - 1], kSmallestPositiveKey, kInfKey);
}

class SampledTopkSparsifier final : public Sparsifier {
 public:
  explicit SampledTopkSparsifier(const SparsifierOptions& options)
      : options_(options), scan_(GetMagnitudeScanFn(SupportedOrAuto(options.simd))), rng_(options.seed) {}

  Status Sparsify(Span<const float> grad, double density, SparseVector* out) override {
    const size_t n = grad.size();
    FRUGAL_RETURN_IF_ERROR(CheckSparsifyArgs(n, density, options_.tensor_name));
    out->Clear(n);
    const size_t k = TargetCount(n, density);
    if (k == 0 || n < 4 * kMinSample || k > n / 4) {
      FRUGAL_RETURN_IF_ERROR(CheckFinite(grad, options_.tensor_name));
      ++calls_;
      if (k > 0) {
        ++stats_.exact_direct;
        SelectExact(grad, k, out);
      }
      return Status::Ok();
    }
    uint64_t rng = rng_;  // committed only if the call succeeds
    DrawSample(grad.data(), n, k, &rng, &sample_);
    uint32_t lo = 0;
    ScanResult r;
    for (int attempt = 0; attempt < 2; ++attempt) {
      size_t cap = 0;
      lo = ScanThreshold(&sample_, sample_.rank << (2 * attempt), &cap);
      r = Scan(grad, lo, std::min(cap, n));
      if (r.overflow || r.count >= k || lo == kSmallestPositiveKey) break;
      ++stats_.rescans;
    }
    // After an overflow the scan has not seen the whole tensor.
    if (r.overflow || r.max_key >= kInfKey) FRUGAL_RETURN_IF_ERROR(CheckFinite(grad, options_.tensor_name));
    rng_ = rng;
    ++calls_;
    ++stats_.sampled;
    out->indices.resize(k);
    out->values.resize(k);
    const KeyedList list{list_ids_.data(), list_bits_.data(), r.count};
    if (!r.overflow && r.count >= k) {
      const uint32_t kth = EmitLargest(list, k, lo, r.max_key, &hist_, &scratch_, out->indices.data(),
                                       out->values.data());
      threshold_ = FromBits(kth);
    } else if (!r.overflow && lo == kSmallestPositiveKey) {
      ++stats_.zero_fills;
      SelectNonzerosAndFirstZeros(grad, k - r.count, out);
    } else {
      ++stats_.exact_fallbacks;
      SelectExact(grad, k, out);
    }
    return Status::Ok();
  }

  SparsifierState state() const override { return SparsifierState{kind(), threshold_, rng_, calls_}; }
  Status RestoreState(const SparsifierState& s) override {
    if (s.kind != kind()) return Status::InvalidArgument("cannot restore a '" + s.kind + "' state into " + kind());
    if (!std::isfinite(s.threshold) || s.threshold < 0) return Status::InvalidArgument("invalid threshold");
    threshold_ = s.threshold;
    rng_ = s.rng_state;
    calls_ = s.calls;
    return Status::Ok();
  }
  const char* kind() const override { return "sampled_topk"; }

  const SampledTopkStats& stats() const { return stats_; }

 private:
  ScanResult Scan(Span<const float> grad, uint32_t lo, size_t cap) {
    // Grow-only: shrinking and growing again would re-zero megabytes.
    if (list_ids_.size() < cap + kScanSlack) {
      list_ids_.resize(cap + kScanSlack);
      list_bits_.resize(cap + kScanSlack);
    }
    return scan_(grad.data(), grad.size(), lo, list_ids_.data(), list_bits_.data(), cap);
  }

  // Every nonzero value (fewer than k) and the first `zeros` exact zeros.
  void SelectNonzerosAndFirstZeros(Span<const float> grad, size_t zeros, SparseVector* out) {
    size_t j = 0;
    for (size_t i = 0; i < grad.size(); ++i) {
      const uint32_t key = MagnitudeKey(grad[i]);
      if (key == 0 && zeros == 0) continue;
      zeros -= key == 0;
      out->indices[j] = static_cast<uint32_t>(i);
      out->values[j] = grad[i];
      ++j;
    }
    threshold_ = 0.0;
  }

  // The same selection over the whole tensor. REQUIRES: grad finite, 0 < k <= n.
  void SelectExact(Span<const float> grad, size_t k, SparseVector* out) {
    out->indices.resize(k);
    out->values.resize(k);
    const KeyedList all{nullptr, reinterpret_cast<const uint32_t*>(grad.data()), grad.size()};
    uint32_t max_key = 0;
    for (size_t i = 0; i < grad.size(); ++i) max_key = std::max(max_key, all.Key(i));
    const uint32_t kth = EmitLargest(all, k, 0, max_key, &hist_, &scratch_, out->indices.data(), out->values.data());
    threshold_ = FromBits(kth);
    // A fallback on a large tensor should not pin a large scratch for good.
    if (scratch_.capacity() > 4 * kMaxSample) std::vector<uint32_t>().swap(scratch_);
  }

  SparsifierOptions options_;
  MagnitudeScanFn scan_;
  uint64_t rng_;
  double threshold_ = 0.0;  // magnitude of the weakest value sent by the last call
  uint64_t calls_ = 0;
  SampledTopkStats stats_;
  // Scratch reused across calls so the steady state does not allocate.
  Sample sample_;
  std::vector<uint32_t> list_ids_, list_bits_, hist_, scratch_;
};

}  // namespace

std::unique_ptr<Sparsifier> MakeSampledTopkSparsifier(const SparsifierOptions& options) {
  return std::make_unique<SampledTopkSparsifier>(options);
}

const SampledTopkStats* SampledTopkStatsOf(const Sparsifier& sparsifier) {
  const auto* s = dynamic_cast<const SampledTopkSparsifier*>(&sparsifier);
  return s ? &s->stats() : nullptr;
}

}  // namespace frugal::compress::internal
