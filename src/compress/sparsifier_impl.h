// Internal: the concrete sparsifiers behind CreateSparsifier, and helpers they
// share. Not part of the public API.
#pragma once

#include <memory>

#include "frugal/compress/sparsifier.h"

namespace frugal::compress::internal {

std::unique_ptr<Sparsifier> MakeTopkSparsifier(const SparsifierOptions& options);
std::unique_ptr<Sparsifier> MakeBlockSparsifier(const SparsifierOptions& options);
std::unique_ptr<Sparsifier> MakeRandomkSparsifier(const SparsifierOptions& options);

// InvalidArgument unless density is in [0, 1] and n fits u32 indices.
Status CheckSparsifyArgs(size_t n, double density, const std::string& tensor_name);

// Writes into out the positions of the `count` largest keys among keys[ids[j]]
// (ties: lower id first), keeping the ids' order. ids must be increasing, so
// the output is too. REQUIRES: count <= ids.size().
void SelectLargest(const float* keys, Span<const uint32_t> ids, size_t count, std::vector<float>* scratch,
                   std::vector<uint32_t>* out);

}  // namespace frugal::compress::internal
