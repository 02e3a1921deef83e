// Internal: the concrete sparsifiers behind CreateSparsifier, and helpers they
// share. Not part of the public API.
#pragma once

#include <memory>

#include "frugal/compress/sparsifier.h"

namespace frugal::compress::internal {

std::unique_ptr<Sparsifier> MakeTopkSparsifier(const SparsifierOptions& options);
std::unique_ptr<Sparsifier> MakeBlockSparsifier(const SparsifierOptions& options);
std::unique_ptr<Sparsifier> MakeRandomkSparsifier(const SparsifierOptions& options);
std::unique_ptr<Sparsifier> MakeSampledTopkSparsifier(const SparsifierOptions& options);

// InvalidArgument unless density is in [0, 1] and n fits u32 indices.
Status CheckSparsifyArgs(size_t n, double density, const std::string& tensor_name);

// Writes into out the positions of the `count` largest keys among keys[ids[j]]
// (ties: lower id first), keeping the ids' order. ids must be increasing, so
// the output is too. REQUIRES: count <= ids.size().
void SelectLargest(const float* keys, Span<const uint32_t> ids, size_t count, std::vector<float>* scratch,
                   std::vector<uint32_t>* out);

// `level` if this CPU supports it, else kAuto.
SimdLevel SupportedOrAuto(SimdLevel level);

// The kernel for `level` among one per instruction set (kAuto = the best this
// CPU supports); nullptr if the CPU lacks the requested one.
template <class Fn>
Fn PickSimdKernel(SimdLevel level, Fn scalar, Fn avx2, Fn avx512) {
  const SimdLevel best = DetectSimdLevel();
  if (level == SimdLevel::kAuto) level = best;
  switch (level) {
    case SimdLevel::kScalar:
      return scalar;
    case SimdLevel::kAvx2:
      return best == SimdLevel::kScalar ? nullptr : avx2;
    case SimdLevel::kAvx512:
      return best == SimdLevel::kAvx512 ? avx512 : nullptr;
    default:
      return nullptr;
  }
}

// How `sampled_topk` calls went (Note [Sampled top-k]); for tests and benchmarks.
struct SampledTopkStats {
  uint64_t sampled = 0;          // calls that sampled and scanned
  uint64_t rescans = 0;          // second scans with a lower threshold (the first list was short)
  uint64_t zero_fills = 0;       // calls on tensors with fewer than k nonzeros
  uint64_t exact_fallbacks = 0;  // sampled calls that fell back to exact selection over everything
  uint64_t exact_direct = 0;     // calls on tensors too small or too dense to sample
};
// The stats of a `sampled_topk` sparsifier; nullptr for other kinds.
const SampledTopkStats* SampledTopkStatsOf(const Sparsifier& sparsifier);

inline uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [0, bound) by multiply-shift (Lemire); the bias is below 2^-32.
inline uint64_t Below(uint64_t* state, uint64_t bound) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(SplitMix64(state)) * bound) >> 64);
}

}  // namespace frugal::compress::internal
