// Merge: sum of W sparse vectors without densifying (the reduce step of a
// sparse all-reduce).
#pragma once

#include "frugal/common/span.h"
#include "frugal/common/status.h"
#include "frugal/compress/sparse_vector.h"

namespace frugal::compress {

// Replaces *out with the element-wise sum of inputs, indices strictly
// increasing; coordinates present in several inputs are summed in input
// order (so the result is deterministic). Runs a W-way heap merge: O(K log W)
// time for K = total nnz, O(K) memory (the output only).
// Fails with InvalidArgument if an input breaks the SparseVector invariants or
// the dense sizes differ. W = 0 gives an empty vector of dense_size 0.
Status MergeSparse(Span<const SparseVector* const> inputs, SparseVector* out);

}  // namespace frugal::compress
