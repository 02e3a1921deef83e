// Merge: sum of W sparse vectors without densifying (the reduce step of a
// sparse all-reduce).
#pragma once

#include <cstdint>
#include <vector>

#include "frugal/common/span.h"
#include "frugal/common/status.h"
#include "frugal/compress/codec.h"
#include "frugal/compress/sparse_vector.h"

namespace frugal::compress {

// Replaces *out with the element-wise sum of inputs, indices strictly
// increasing; coordinates present in several inputs are summed in input
// order (so the result is deterministic). Runs a W-way heap merge: O(K log W)
// time for K = total nnz, O(K) memory (the output only).
// Fails with InvalidArgument if an input breaks the SparseVector invariants or
// the dense sizes differ. W = 0 gives an empty vector of dense_size 0.
Status MergeSparse(Span<const SparseVector* const> inputs, SparseVector* out);

// The combine of a sparse exchange (Note [Merged updates] in merge.cc):
// decodes the encoded `parts` and sums them in the given order into `out`
// (one part is decoded as is). Corruption for a part that does not decode,
// InvalidArgument for dense sizes that differ between parts.
Status DecodeAndMerge(const std::vector<std::vector<uint8_t>>& parts, SparseVector* out);

// DecodeAndMerge, then encoded in MergedWireFormat(wire): the combine of a
// leader whose result travels on. The gradient pipeline, the compressed
// all-reduce and the profiler's measure of it share this one.
Result<std::vector<uint8_t>> CombineEncoded(const std::vector<std::vector<uint8_t>>& parts, WireFormat wire);

}  // namespace frugal::compress
