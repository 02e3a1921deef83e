// Dense element-wise kernels of a local-mode round (engine::LocalSync): the
// pseudo-gradient taken at a fragment's sync and the rebase of a rank's own
// progress after the outer step. They stream whole buckets, so they are
// written as single fused passes (bench/round measures them against a
// plain memory-bandwidth pass).
//
// Thread safety: free functions without shared state.
#pragma once

#include "frugal/common/span.h"

namespace frugal::compress {

// At a sync: delta[i] = anchor[i] - master[i] (the progress to send) and
// base[i] = master[i] (where the rank's next progress is measured from).
// REQUIRES: all four the same size; delta and base distinct from the inputs.
void PseudoGradient(Span<const float> anchor, Span<const float> master, Span<float> delta, Span<float> base);

// After the outer step moved the anchor: master[i] = anchor[i] - (base[i] -
// master[i]), the rank's progress since the sync on top of the new anchor.
// REQUIRES: all three the same size.
void Rebase(Span<const float> anchor, Span<const float> base, Span<float> master);

}  // namespace frugal::compress
