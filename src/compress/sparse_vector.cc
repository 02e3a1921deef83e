#include "frugal/compress/sparse_vector.h"

#include <algorithm>
#include <cassert>
#include <string>

namespace frugal::compress {

Status ValidateSparseVector(const SparseVector& v) {
  if (v.indices.size() != v.values.size()) {
    return Status::InvalidArgument("sparse vector has " + std::to_string(v.indices.size()) +
                                   " indices but " + std::to_string(v.values.size()) + " values");
  }
  // n strictly increasing indices below n are exactly 0 .. n-1: a
  // branch-free test that vectorises; the loop below names what is wrong.
  if (!v.indices.empty() && v.indices.size() == v.dense_size) {
    uint32_t bad = 0;
    const uint32_t* idx = v.indices.data();
    for (size_t j = 0; j < v.indices.size(); ++j) bad |= idx[j] ^ static_cast<uint32_t>(j);
    if (bad == 0) return Status::Ok();
  }
  for (size_t j = 0; j < v.indices.size(); ++j) {
    if (v.indices[j] >= v.dense_size) {
      return Status::InvalidArgument("index " + std::to_string(v.indices[j]) + " at position " +
                                     std::to_string(j) + " is out of range for dense size " +
                                     std::to_string(v.dense_size));
    }
    if (j > 0 && v.indices[j] <= v.indices[j - 1]) {
      return Status::InvalidArgument("indices are not strictly increasing at position " +
                                     std::to_string(j));
    }
  }
  return Status::Ok();
}

void Densify(const SparseVector& v, Span<float> dense) { Densify(v, 1.0f, dense); }

void Densify(const SparseVector& v, float scale, Span<float> dense) {
  assert(dense.size() == v.dense_size);
  const size_t nnz = v.indices.size();
  const float* values = v.values.data();
  float* out = dense.data();
  if (nnz == dense.size()) {  // strictly increasing indices below dense_size: 0 .. n-1
    for (size_t i = 0; i < nnz; ++i) out[i] = values[i] * scale;
    return;
  }
  std::fill(dense.begin(), dense.end(), 0.0f);
  for (size_t j = 0; j < nnz; ++j) out[v.indices[j]] = values[j] * scale;
}

}  // namespace frugal::compress
