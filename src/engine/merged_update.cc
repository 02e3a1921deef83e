#include "merged_update.h"

#include "frugal/compress/merge.h"

namespace frugal::engine {

// Note [Merged updates]
// A merged update that travels on (a hierarchical leader's cluster sum, sent
// to other leaders and to its members) is encoded again, in
// MergedWireFormat: integer codes become int8, whose rounding is not fed
// back. A rank's final combine (every rank in the flat exchange, each
// leader's last one) needs no encoding: the pipeline takes the exchange's
// parts uncombined (SparseExchange::RunUncombined) and merges them straight
// into the update it applies. That saved an int8 encode and decode of the
// whole merged update per bucket and step, and the flat exchange's update is
// now the exact sum of what the ranks sent. Every rank merges the same parts
// in rank order, so the replicas still apply identical updates.

Status DecodeAndMerge(const std::vector<comm::Bytes>& parts, compress::SparseVector* out) {
  if (parts.size() == 1) return compress::Decode(Span<const uint8_t>(parts[0].data(), parts[0].size()), {}, out);
  // Reused by this pipeline thread from call to call: the decoded parts of a
  // bucket are megabytes, and fresh vectors paid their page faults anew at
  // every step (3% of a 4-worker mlp run's CPU in exc_page_fault).
  thread_local std::vector<compress::SparseVector> decoded;
  if (decoded.size() < parts.size()) decoded.resize(parts.size());
  std::vector<const compress::SparseVector*> ptrs;
  ptrs.reserve(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    FRUGAL_RETURN_IF_ERROR(compress::Decode(Span<const uint8_t>(parts[i].data(), parts[i].size()), {}, &decoded[i]));
    ptrs.push_back(&decoded[i]);
  }
  return compress::MergeSparse(Span<const compress::SparseVector* const>(ptrs.data(), ptrs.size()), out);
}

Result<comm::Bytes> CombineEncoded(const std::vector<comm::Bytes>& parts, compress::WireFormat wire) {
  compress::SparseVector merged;
  FRUGAL_RETURN_IF_ERROR(DecodeAndMerge(parts, &merged));
  comm::Bytes out;  // a union of whole blocks is whole blocks, so the wire format still fits
  FRUGAL_RETURN_IF_ERROR(compress::Encode(merged, compress::MergedWireFormat(wire), &out));
  return out;
}

}  // namespace frugal::engine
