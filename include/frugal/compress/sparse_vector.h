// SparseVector: the (index, value) form of a gradient that compress, comm and
// optim pass between each other.
//
// Invariants kept by every producer in this module (and checked by the codec
// and Merge): indices are strictly increasing and < dense_size, and
// indices.size() == values.size().
//
// Thread safety: plain value type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "frugal/common/span.h"
#include "frugal/common/status.h"

namespace frugal::compress {

// One cache line of fp32: the unit of the `block` sparsifier and of the
// block-id index encoding.
inline constexpr size_t kBlockSize = 16;

struct SparseVector {
  uint64_t dense_size = 0;
  std::vector<uint32_t> indices;
  std::vector<float> values;

  size_t nnz() const { return indices.size(); }
  void Clear(uint64_t new_dense_size) {
    dense_size = new_dense_size;
    indices.clear();
    values.clear();
  }
};

// Ok iff the invariants above hold.
Status ValidateSparseVector(const SparseVector& v);

// Writes v into dense (zeroing everything else). REQUIRES: dense.size() == v.dense_size.
void Densify(const SparseVector& v, Span<float> dense);
// The same with every value multiplied by `scale` (one fp32 product each, so
// scale 1 writes the values as they are). A vector holding every index (a
// density-1 round) is written in one contiguous pass.
void Densify(const SparseVector& v, float scale, Span<float> dense);

}  // namespace frugal::compress
