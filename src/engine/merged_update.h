// Combining the encoded sparse contributions of an exchange: shared by the
// gradient pipeline and CompressedAllReduce (Note [Merged updates]).
#pragma once

#include <vector>

#include "frugal/comm/transport.h"
#include "frugal/common/status.h"
#include "frugal/compress/codec.h"
#include "frugal/compress/sparse_vector.h"

namespace frugal::engine {

// Decodes `parts` and sums them in the given order into `out` (one part is
// decoded as is). Corruption for a part that does not decode or a dense size
// that differs between parts.
Status DecodeAndMerge(const std::vector<comm::Bytes>& parts, compress::SparseVector* out);

// DecodeAndMerge, then encoded in MergedWireFormat(wire): the CombineFn of a
// leader whose result travels on.
Result<comm::Bytes> CombineEncoded(const std::vector<comm::Bytes>& parts, compress::WireFormat wire);

}  // namespace frugal::engine
