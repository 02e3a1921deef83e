// Sparsifier: picks the important coordinates of a dense fp32 gradient.
//
// One Sparsifier instance serves one tensor: implementations keep per-tensor
// state between calls (the `block` threshold, the `randomk` RNG), which is
// exposed as a SparsifierState so a checkpoint can save and restore it.
//
//   SparsifierOptions options;
//   options.tensor_name = "fc1.weight";
//   FRUGAL_ASSIGN_OR_RETURN(auto s, CreateSparsifier("block", options));
//   SparseVector out;
//   FRUGAL_RETURN_IF_ERROR(s->Sparsify(grad, 0.01, &out));
//
// Kinds:
//   "topk"    exact top-k by magnitude; ties broken by lower index. Reference.
//   "block"   cache-line blocks of 16 values scored by L1 norm, selected with a
//             remembered per-tensor threshold; see Note [Block sparsifier] in
//             src/compress/block_sparsifier.cc. Output is whole blocks.
//   "randomk" k uniformly random coordinates (ablations).
//   "sampled_topk" the same coordinates as "topk", bit for bit, at about the
//             cost of one streaming pass: a threshold estimated from a random
//             sample narrows the search to ~1.4 k candidates, corrected
//             exactly; see Note [Sampled top-k] in
//             src/compress/sampled_topk_sparsifier.cc.
//
// Every kind returns k = TargetCount(n, density) coordinates for
// topk/randomk/sampled_topk;
// block returns ceil(k / 16) whole blocks (so up to k + 15 values, or fewer
// when the short tail block is among them).
//
// Output indices are strictly increasing. A NaN or Inf in the input is an
// InvalidArgument error naming the tensor and the first bad index.
//
// Thread safety: not thread-safe; one instance per tensor per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frugal/common/span.h"
#include "frugal/common/enum_names.h"
#include "frugal/common/status.h"
#include "frugal/compress/sparse_vector.h"

namespace frugal::compress {

// Per-tensor state carried between calls. Plain fields so callers can inspect
// them; Serialize/Deserialize give a versioned byte form for checkpoints.
struct SparsifierState {
  std::string kind;          // "topk", "block", "randomk" or "sampled_topk".
  double threshold = 0.0;    // block: current L1 threshold (0 = not yet calibrated);
                             // sampled_topk: last call's k-th magnitude (informational).
  uint64_t rng_state = 0;    // randomk, sampled_topk: generator state.
  uint64_t calls = 0;        // Sparsify calls so far.

  std::vector<uint8_t> Serialize() const;
  static Result<SparsifierState> Deserialize(Span<const uint8_t> bytes);
};

// Which implementation of the block scan to use; kAuto picks the best the CPU
// supports at run time. All give identical selections.
enum class SimdLevel { kAuto, kScalar, kAvx2, kAvx512 };

struct SparsifierOptions {
  // Used in error messages ("tensor 'fc1.weight': ..."). Default: "".
  std::string tensor_name;
  // randomk / sampled_topk seed. Default: 1.
  uint64_t seed = 1;
  // block, sampled_topk: force a scan implementation (tests, benchmarks); a level the CPU
  // lacks falls back to kAuto. Default: kAuto.
  SimdLevel simd = SimdLevel::kAuto;
};

// k for n elements at density d: round(d * n), at least 1 when n > 0 and d > 0,
// at most n.
size_t TargetCount(size_t n, double density);

class Sparsifier {
 public:
  virtual ~Sparsifier() = default;

  // Replaces *out with the selected coordinates of grad (values copied).
  // REQUIRES: grad.size() < 2^32. density in [0, 1] (else InvalidArgument).
  virtual Status Sparsify(Span<const float> grad, double density, SparseVector* out) = 0;

  virtual SparsifierState state() const = 0;
  // Fails if the state belongs to another kind.
  virtual Status RestoreState(const SparsifierState& state) = 0;
  virtual const char* kind() const = 0;
};

// The sparsifiers by name; CreateSparsifier takes NameOf(kind).
enum class SparsifierKind { kBlock, kTopk, kRandomk, kSampledTopk };

// "topk", "block", "randomk" or "sampled_topk"; anything else is
// InvalidArgument listing them.
Result<std::unique_ptr<Sparsifier>> CreateSparsifier(const std::string& kind,
                                                     const SparsifierOptions& options = {});

// Best SimdLevel this CPU supports (never kAuto).
SimdLevel DetectSimdLevel();
const char* SimdLevelName(SimdLevel level);

// Ok if every value is finite; else InvalidArgument naming tensor and index.
Status CheckFinite(Span<const float> values, const std::string& tensor_name, const char* what = "gradient");

}  // namespace frugal::compress

template <>
struct frugal::EnumNames<frugal::compress::SparsifierKind> {
  static constexpr std::pair<compress::SparsifierKind, const char*> kTable[] = {
      {compress::SparsifierKind::kBlock, "block"},
      {compress::SparsifierKind::kTopk, "topk"},
      {compress::SparsifierKind::kRandomk, "randomk"},
      {compress::SparsifierKind::kSampledTopk, "sampled_topk"}};
};
